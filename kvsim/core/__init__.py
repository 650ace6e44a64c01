"""The floor of the house: paths, units and the error base class. Imports nothing else of kvsim."""
