"""One adapter per sandbox vendor behind the `providers.base` contract, with the parts only its family uses."""
