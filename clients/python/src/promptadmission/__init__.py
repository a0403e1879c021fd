"""Python client of the Prompt Admission Service; the generated API is `promptadmission.v1`."""
