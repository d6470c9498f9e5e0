"""Storage: the protocol core speaks to, and one package per driver."""
