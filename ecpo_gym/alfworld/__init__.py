"""ALFWorld on TextWorld's PDDL engine: real games (``ecpo/ALFWorld-v0``) and a procedural generator
(``ecpo/ALFWorldGen-v0``). Importing this package loads no engine; ``env`` does on first reset."""
