"""The upstream requests' admission (proxy/admission.py): first come first served, a fan-out's places
taken all at once, and places given back by requests that leave the line or use fewer."""

from __future__ import annotations

import asyncio

import pytest

from proxy.admission import Admission


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_request_for_several_places_waits_for_all_and_none_behind_it_jumps_ahead() -> None:
    async def main() -> list[str]:
        admission = Admission(3)
        order: list[str] = []

        async def take(name: str, count: int) -> None:
            await admission.take(count)
            order.append(name)

        await admission.take(2)  # two held
        fan_out = asyncio.create_task(take("fan-out of 3", 3))
        await _settle()
        single = asyncio.create_task(take("single", 1))  # one place is free, but the fan-out came first
        await _settle()
        assert order == []
        admission.give(2)
        await _settle()
        assert order == ["fan-out of 3"]
        admission.give(3)
        await asyncio.gather(fan_out, single)
        assert admission.taken == 1
        return order

    assert asyncio.run(main()) == ["fan-out of 3", "single"]


@pytest.mark.parametrize("admitted", [False, True], ids=["while-it-waits", "once-admitted"])
def test_a_request_cancelled_in_line_lets_the_one_behind_it_in(admitted: bool) -> None:
    """Cancelled while it waits for two places, or once given its place but before it resumed."""

    async def main() -> int:
        admission = Admission(2)
        await admission.take(2 if admitted else 1)
        gone = asyncio.create_task(admission.take(1 if admitted else 2))
        behind = asyncio.create_task(admission.take(1))
        await _settle()
        assert not behind.done()
        if admitted:
            admission.give(1)  # the place is the first's: cancelled now, it never resumes to use it
        gone.cancel()
        await asyncio.wait_for(behind, 1)
        return admission.taken

    assert asyncio.run(main()) == 2


def test_a_reservations_unused_places_go_back_when_it_closes() -> None:
    async def main() -> tuple[bool, bool, bool, int]:
        admission = Admission(4)
        reservation = await admission.reserve(3)
        used = reservation.use(), reservation.use()
        reservation.close()
        after_close = reservation.use()
        return used[0], used[1], after_close, admission.taken

    assert asyncio.run(main()) == (True, True, False, 2)


def test_more_places_than_there_are_is_an_error_not_a_wait_forever() -> None:
    async def main() -> None:
        await Admission(2).take(3)

    with pytest.raises(ValueError, match="3 places"):
        asyncio.run(main())


def test_a_place_given_back_while_the_reservation_is_open_is_its_own_again() -> None:
    """A fan-out's request asked again (an empty stream asked again whole, Q52) uses its own place
    again instead of waiting behind the fan-out that came next, which waits for its siblings'."""

    async def main() -> tuple[bool, bool, int, int]:
        admission = Admission(4)
        reservation = await admission.reserve(3)
        assert all(reservation.use() for _ in range(3))
        behind = asyncio.create_task(admission.take(3))  # the next fan-out: 1 place is free
        await _settle()
        reservation.give()  # the empty stream's end
        again = reservation.use()  # its request asked again
        reservation.close()
        still_waiting = not behind.done()
        taken = admission.taken
        for _ in range(3):  # the three requests end
            reservation.give()
        await asyncio.wait_for(behind, 1)
        return again, still_waiting, taken, admission.taken

    assert asyncio.run(main()) == (True, True, 3, 3)
