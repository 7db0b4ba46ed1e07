"""The executor pool actor (``actor``): which executor processes exist (``processes``: starting,
watching, restarting and stopping each) and which part of a load goes to which one
(``placement``)."""
