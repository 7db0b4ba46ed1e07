"""The KServe v2 REST protocol's bodies, with Triton's extensions over HTTP: ``infer`` (the infer
codec: the request as a whole, its arrays in ``inputs``, the plain header's fast path in ``scan``,
the response in ``response``), ``admin`` (every other REST body), ``generate`` (the generate
extension), ``json_tensors`` (tensor data as JSON), ``content_coding`` (gzip and deflate) and
``openapi.json``, the API's OpenAPI description. Pure: no sockets, no HTTP framing
(``inferd.plugins.frontends.kserve_http`` serves them)."""
