// skewscope's monitoring mixin: the rules and dashboard of `skewscope rules` and
// `skewscope dashboard`, written by `skewscope mixin -o DIR` (docs/monitoring.md, "mixin").
//
//   local skewscope = (import 'mixin.libsonnet') + {
//     _config+:: { thresholds+: { hot_ratio: 1.5 }, windowSeconds: 60 },
//   };
//   skewscope.prometheusAlerts   // also prometheusRules, grafanaDashboards
(import 'config.libsonnet') +
(import 'rules/rules.libsonnet') +
(import 'alerts/alerts.libsonnet') +
(import 'dashboards/dashboards.libsonnet')
