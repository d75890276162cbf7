"""What a request does, between the API that parses it and the conductor that acts.

A service function owns one change: it opens the transaction, finds the
records, checks the rules (flow specs, fencing), writes with a compare and
bump of the node's epoch, records history and queues the conductor's work.
Routes parse, authorize, call one of these and render what it returns.
"""
