"""A live server judged: ``check``'s battery of probes (every protocol's, probes.py), each sent and
recorded exactly (recorder.py), judged as a transcript is (runner.py); requests to record from a file
(requests_file.py)."""
