"""The sources of a request's normalized output, which the response writer reads (base.py says what a
source is): one upstream request, a fan-out, a token-id prompt's text fallback, an upstream's own
endpoint of a protocol, what a request becomes on one replica, and its failover to another."""
