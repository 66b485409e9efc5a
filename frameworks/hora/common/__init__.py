"""Framework-neutral pieces shared by every frontend: lifecycle and topology (``basics``), rank
discovery, process sets, the submission layer (``ops``) and object collectives."""
