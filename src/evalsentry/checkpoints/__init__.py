"""Checkpoints as data: their files, their lineage and the registry that pins them.

Owns: reading a checkpoint's bytes safely (``payload``, ``safetensors_file``), rebuilding one
with a trusted factory and writing one (``checkpoint``), its lineage (``lineage``), what training
cost (``training``) and the registry of versions and stages (``registry``). Imports the root
modules and ``cost``; never the evalsets, the gate or evaluation: a checkpoint is rebuilt the
same whatever it will be evaluated on.
"""
