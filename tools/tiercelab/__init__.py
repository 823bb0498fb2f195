"""tiercelab — the Python side of the Tierce lab tools (tools/tierce-cluster). Standard library
only. cluster.up/down/restart_node/status are plain functions: other commands (e.g. `run`) and
tests call them in-process."""
