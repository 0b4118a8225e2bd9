"""The suite's subcommands of ``conformant``: ``validate``, ``check``, ``record`` and ``replay-server``, each
registered under the ``conformant.commands`` entry points (pyproject.toml), as ``serve`` and ``backend``
are by their own packages."""
