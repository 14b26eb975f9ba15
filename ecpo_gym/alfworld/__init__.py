"""ALFWorld: real games (``ecpo/ALFWorld-v0``) and a procedural generator (``ecpo/ALFWorldGen-v0``), played on
the native engine (``native/``, the default) or on TextWorld's PDDL engine (``engine.py``); both give the same
text on every game. Importing this package loads no engine; ``env`` does on first reset."""
