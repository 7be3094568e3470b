"""The course's exercises: how an answer is judged (``core``, ``means``, ``trial``, and
``state``: what every answer must leave alone), and one module per notebook with its
exercises' inputs, right answers and rules.

A new notebook adds a module here and its names to ``helpers.checks``, which is what the
notebooks import.
"""
