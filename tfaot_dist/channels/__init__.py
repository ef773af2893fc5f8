"""Distribution: channels (directory, HTTP, OCI), installing into user areas, the catalogue, CPU checks of the host."""
