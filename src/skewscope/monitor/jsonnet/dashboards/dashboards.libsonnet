// The Grafana dashboard of `skewscope dashboard` (its panels query the engine metrics); the
// max/median panels draw _config.thresholds.hot_ratio as their dashed line.
local lib = import '../lib/params.libsonnet';
local hotLine(p, hot) =
  if std.objectHas(p, 'fieldConfig') && std.objectHas(p.fieldConfig.defaults, 'thresholds') then
    local steps = p.fieldConfig.defaults.thresholds.steps;
    p {
      description: std.strReplace(p.description, lib.g(steps[1].value) + ' (hot_ratio',
                                  lib.g(hot) + ' (hot_ratio'),
      fieldConfig+: { defaults+: { thresholds+: { steps: [steps[0], steps[1] { value: hot }] } } },
    }
  else p;
{
  grafanaDashboards+:: {
    local c = $._config,
    local dash = import 'skewscope-load-skew.json',
    assert lib.shaped(c),
    'skewscope-load-skew.json': dash {
      title: c.dashboardTitle,
      panels: [hotLine(p, c.thresholds.hot_ratio) for p in dash.panels],
    },
  },
}
