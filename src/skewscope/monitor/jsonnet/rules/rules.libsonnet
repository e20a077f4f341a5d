// The recording rules, one group per dialect (templates.json, filled from _config).
local lib = import '../lib/params.libsonnet';
{
  prometheusRules+:: {
    local c = $._config,
    assert lib.shaped(c),
    groups+: [
      { name: 'skewscope-' + t.dialect, rules: lib.fill(t.rules, lib.params(c)) }
      for t in import 'templates.json'
    ],
  },
}
