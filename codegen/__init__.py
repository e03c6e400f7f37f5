"""Build-time code generation: typed heuristic rules -> kernel instantiations and dispatch chain."""
