"""Tool-call syntaxes of the open model families, one module each, read by the bundled backend, the
proxy's repair of calls left as text (Q79) and the judge (see base.py). ``catalog`` lists them."""
