"""MEI co-evolution (Neos §3.5): select logged MEI calls, buffer them, turn them into SFT data, train and serve MEI.

Framework-free: :mod:`.selection`, :mod:`.buffer`, :mod:`.chat`. verl adapters: :mod:`.sft` (verl's SFT tensor
layout and loss), :mod:`.worker` (verl's ``TrainingWorker`` group). Serving: :mod:`.server`. Importing this package
imports none of them.
"""
