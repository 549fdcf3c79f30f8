"""The roles of an RL step, each a plain class with batch-in / batch-out methods.

The controller loop calls these methods and nothing else, so a runtime can place each role
in-process (the embedded default) or behind an actor handle without the loop changing.
"""
