"""When each tensor is alive: the step's timeline (forward → backward → optimizer), its peaks and what dominates
them (`timeline`), and the transients eager PyTorch adds (`eager`)."""
