"""Checkpoints as data: their files, their lineage and the registry that pins them.

Owns: reading and writing checkpoints (``checkpoint``, ``safetensors_file``), their lineage
(``lineage``), what training cost (``training``) and the registry of versions and stages
(``registry``). Imports the root modules and ``cost``; never the evalsets, the gate or
evaluation: a checkpoint is rebuilt the same whatever it will be evaluated on.
"""
