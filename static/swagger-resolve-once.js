// Swagger UI resolves the schema again for every operation a reader opens; on an OpenAPI 3.1
// schema each of those is a whole-document pass (ApiDOM) taking seconds, so opening one
// operation froze the page for 2 to 6 s. This plugin resolves the whole document once and
// answers each part from that result (the same values: a 3.1 subtree is resolved against the
// whole document anyway). It wraps SwaggerUIBundle so drf-spectacular's own page script, which
// calls it, needs no change. Nothing is loaded from anywhere.
(function () {
  "use strict";
  var bundle = window.SwaggerUIBundle;
  if (!bundle || !bundle.plugins || !bundle.plugins.SwaggerClient) return;

  function startsWith(path, prefix) {
    if (!Array.isArray(path)) return true;
    for (var i = 0; i < prefix.length && i < path.length; i++) if (path[i] !== prefix[i]) return false;
    return true;
  }

  function resolveOnce(system) {
    var resolveSubtree = bundle.plugins.SwaggerClient(system).fn.resolveSubtree;
    var whole = null, wholeOf = null;
    return {fn: {resolveSubtree: function (spec, path, options) {
      var source = system.specSelectors.specStr();
      if (whole === null || wholeOf !== source) {  // a new schema: resolve it once more
        wholeOf = source;
        whole = resolveSubtree(spec, [], options);
      }
      return whole.then(function (result) {
        var value = result.spec;
        for (var i = 0; i < path.length && value !== undefined && value !== null; i++) value = value[path[i]];
        var errors = (result.errors || []).filter(function (e) { return startsWith(e.fullPath, path); });
        return {spec: value, errors: errors};
      });
    }}};
  }

  var wrapped = function (options) {
    options = Object.assign({}, options);
    options.plugins = (options.plugins || []).concat([resolveOnce]);
    return bundle(options);
  };
  Object.assign(wrapped, bundle);
  window.SwaggerUIBundle = wrapped;
})();
