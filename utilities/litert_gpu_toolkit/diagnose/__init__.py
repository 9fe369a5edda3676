"""Layer 3: wrong numbers at full residency. Bisect by intermediate, classify the first diverging block."""
