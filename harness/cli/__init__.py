"""The `stampede` command: one thin module per subcommand (`main` parses and dispatches).

Imports are deferred per command: `stampede run` must import Locust (gevent patches the interpreter) before
anything imports asyncio or ssl.
"""
