"""Writers (npz, EVD, PCD, manifest) and the range-scan runner that drives them."""
