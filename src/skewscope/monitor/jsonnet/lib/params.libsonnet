// The rule templates' parameters from `_config`: the arithmetic and number formatting of
// skewscope.monitor.template.params (Python's `:g` and PromQL durations), so the mixin renders
// the same text as `skewscope rules` with the same settings.
local g(x) =
  // Python's format(x, 'g'): 6 significant digits, trailing zeros dropped.
  local strip(s) =
    if std.length(std.findSubstr('.', s)) == 0 then s
    else local t = std.rstripChars(s, '0'); if std.endsWith(t, '.') then t[:std.length(t) - 1] else t;
  local a = std.abs(x);
  local sign = if x < 0 then '-' else '';
  if x == 0 then '0'
  else
    local e0 = std.floor(std.log(a) / std.log(10));
    local e1 = if std.pow(10, e0) > a then e0 - 1 else if std.pow(10, e0 + 1) <= a then e0 + 1 else e0;
    // the exponent after rounding to 6 digits (9.999995 rounds up to 10.0000)
    local e = if std.parseJson(std.format('%.5f', a / std.pow(10, e1))) >= 10 then e1 + 1 else e1;
    if e >= -4 && e < 6 then sign + strip(std.format('%.' + std.toString(5 - e) + 'f', a))
    else
      local m = strip(std.format('%.5f', a / std.pow(10, e)));
      sign + m + 'e' + (if e < 0 then '-' else '+') + (if std.abs(e) < 10 then '0' else '') + std.toString(std.abs(e));

local duration(s) =
  local ms = std.floor(s * 1000 + 0.5);
  assert ms > 0 : 'durations must be positive, got %s s' % g(s);
  local units = [u for u in [['d', 86400000], ['h', 3600000], ['m', 60000], ['s', 1000]] if ms % u[1] == 0];
  if std.length(units) > 0 then '%d%s' % [ms / units[0][1], units[0][0]] else '%dms' % ms;

// A template (strings in `%(name)s` format syntax) with every parameter filled in.
local fill(x, p) =
  if std.isString(x) then x % p
  else if std.isArray(x) then [fill(v, p) for v in x]
  else if std.isObject(x) then { [k]: fill(x[k], p) for k in std.objectFields(x) }
  else x;

local params(c) =
  local th = c.thresholds;
  local w = c.windowSeconds;
  local look = c.lookbackWindows * w;
  { [k]: g(th[k]) for k in std.objectFields(th) } + {
    window: duration(w),
    window_seconds: g(w),
    smooth: duration(th.smooth_windows * w),
    smooth_seconds: g(th.smooth_windows * w),
    horizon: duration(th.alert_windows * w),
    lookback: duration(look),
    lookback_seconds: g(look),
    request_floor: g(th.min_requests_per_window / w),
    history: duration(th.min_windows * w),
    runbook_url_base: std.rstripChars(c.runbookUrlBase, '/'),
    'for': duration(if c.forSeconds == null then th.alert_for_windows * w else c.forSeconds),
  };

// The settings that shape the templates themselves: they were fixed when the mixin was
// written, so a change here must be made by running `skewscope mixin` again.
local shaped(c) =
  local shape = import '../shape.json';
  local diff = [k for k in std.objectFields(shape) if c[k] != shape[k]];
  assert std.length(diff) == 0 :
         'skewscope mixin: _config.%s shapes the rule groups and the dashboard: write the mixin '
         % diff[0] + 'again with `skewscope mixin` and the new value (it was written for %s)'
         % std.manifestJsonMinified(shape[diff[0]]);
  true;

{ g: g, duration: duration, fill: fill, params: params, shaped: shaped }
