"""Generated code for promptadmission.v1. Do not edit: run `make generate`."""
