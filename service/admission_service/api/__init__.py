"""The gRPC edge: proto conversion, the servicer, error mapping and the composition root."""
