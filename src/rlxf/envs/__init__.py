"""Environments: the policy acts over one or more turns, the environment answers and scores.

See ``base.py`` for the protocol and docs/environments.md for bringing your own.
"""
