"""Ground floor: environment settings (stdlib only); every other layer may import it."""
