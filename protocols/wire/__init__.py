"""The kernel wire format, the frames every actor and process link speaks: ``codec`` (an
``Envelope`` as a list of frames and back, tensors as buffer frames of their own), ``kinds`` (each
message kind's fields and the checks of its decoded values) and ``flat`` (the flat layouts of the
two kinds of every batch). The messages themselves are ``inferd.protocols.messages``'."""
