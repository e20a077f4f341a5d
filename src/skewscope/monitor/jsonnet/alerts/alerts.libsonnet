// The Skewscope* alerts, one group per dialect (templates.json, filled from _config); each
// links its runbook (runbook_url: _config.runbookUrlBase + '/<alert>.md').
local lib = import '../lib/params.libsonnet';
{
  prometheusAlerts+:: {
    local c = $._config,
    assert lib.shaped(c),
    groups+: [
      { name: 'skewscope-' + t.dialect + '-alerts', rules: lib.fill(t.rules, lib.params(c)) }
      for t in import 'templates.json'
    ],
  },
}
