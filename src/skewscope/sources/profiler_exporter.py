"""What msServiceProfiler's exporters write where nothing was recorded, read as missing.

The exporters fill what they did not measure with 0 (``fillna(0)``, the KV plugin's column
defaults), so a 0 in some columns is no measurement. Read from ``ms_service_profiler``:

* ``plugins/plugin_kvcache.py`` starts every KV metric of every KV event at 0 and fills only
  those its event carries; ``exporter_batch.filter_batch_df`` fills the KV columns of
  scheduling rows without a matching ``KVCacheStatus`` (and of execution rows) with 0. A row
  whose pool has no blocks (``total_blocks`` 0, or ``used_blocks`` and ``free_blocks`` both 0)
  therefore carries no pool level: kvcache.csv's ``Free`` rows hold 0.0 in every block
  column, and only their ``kvcache_usage_rate`` is real (it is 0 too when nothing was);
* ``exporter_kvcache`` of vLLM v0 captures (the action format, ``deviceBlock=`` events named
  ``ACTION_NAMES``) writes ``device_kvcache_left`` = ``len(block_tables)``, a count of block
  tables, not free blocks (not read), and a ``kvcache_usage_rate`` it computes for
  ``USAGE_ACTIONS`` only (0 on the other actions; below 0 where a count exceeds the largest
  ``Free`` count: read as missing by ``profiler_validate.drop_impossible``).
"""

from __future__ import annotations

import polars as pl

# The pool's level; ``blocks_allocated``/``blocks_freed`` of such a row stay as written (a row
# recording no allocation adds none to a window's total).
LEVEL_COLUMNS: tuple[str, ...] = ("total_blocks", "used_blocks", "free_blocks")
ACTION_NAMES: frozenset[str] = frozenset(
    {"Allocate", "AppendSlot", "blocks", "Free", "SwapIn", "SwapOut"}
)
USAGE_ACTIONS: frozenset[str] = frozenset({"Allocate", "AppendSlot", "Free"})
USAGE = "kvcache_usage_rate"


NO_BLOCKS = "_no_blocks"  # a row flagged by ``no_blocks`` (batch.csv: before its lean drop)


def no_blocks(columns: list[str]) -> pl.Expr | None:
    """Rows whose pool has no blocks: the exporter's fill, not a measurement."""
    tests = []
    if "total_blocks" in columns:
        tests.append(pl.col("total_blocks") == 0)
    if "used_blocks" in columns and "free_blocks" in columns:
        tests.append((pl.col("used_blocks") == 0) & (pl.col("free_blocks") == 0))
    if not tests:
        return None
    return pl.any_horizontal(tests).fill_null(False)


def unrecorded_kv(
    df: pl.DataFrame, file: str, counted: pl.Expr | None = None
) -> tuple[pl.DataFrame, list[str]]:
    """KV columns of rows without a KV measurement set to null, with a note; ``counted``: the
    rows the note counts (batch.csv: the scheduling rows; its execution rows always carry 0)."""
    none = pl.col(NO_BLOCKS) if NO_BLOCKS in df.columns else no_blocks(df.columns)
    if none is None:
        return df, []
    blocks = [c for c in LEVEL_COLUMNS if c in df.columns]
    fixes = [pl.when(none).then(None).otherwise(pl.col(c)).alias(c) for c in blocks]
    if USAGE in df.columns:
        fixes.append(
            pl.when(none & (pl.col(USAGE) == 0)).then(None).otherwise(pl.col(USAGE)).alias(USAGE)
        )
    n = int(df.select((none & (pl.lit(True) if counted is None else counted)).sum()).item())
    out = df.with_columns(fixes).drop(NO_BLOCKS, strict=False)
    if n == 0:
        return out, []
    names = ""
    if "name" in df.columns:
        seen = df.filter(none)["name"].drop_nulls().unique().sort().head(3).to_list()
        names = f", e.g. {', '.join(map(str, seen))} rows" if seen else ""
    return out, [
        f"{file}: {n} row(s) carry 0 in every block column{names} (the exporter's fill where "
        "no KV state was recorded) — their total/used/free blocks read as missing"
    ]


def action_format(df: pl.DataFrame, file: str, header: list[str]) -> tuple[pl.DataFrame, list[str]]:
    """kvcache.csv of the action format (a ``device_kvcache_left`` header, action names): usage
    only where the exporter computed it."""
    left = any(h.strip().lower() == "device_kvcache_left" for h in header)
    if not left or "name" not in df.columns or not df["name"].is_in(list(ACTION_NAMES)).any():
        return df, []
    if USAGE not in df.columns:
        return df, [f"{file}: vLLM v0 action rows without kvcache_usage_rate — no KV signal"]
    other = ~pl.col("name").is_in(list(USAGE_ACTIONS)).fill_null(False)
    n = int(df.select((other & pl.col(USAGE).is_not_null()).sum()).item())
    out = df.with_columns(pl.when(other).then(None).otherwise(pl.col(USAGE)).alias(USAGE))
    notes = [
        f"{file}: vLLM v0 action rows (Allocate, AppendSlot, Free, ...): "
        "device_kvcache_left counts block tables, not free blocks — not read"
    ]
    if n:
        notes.append(
            f"{file}: {n} row(s) of other actions (blocks, SwapIn, SwapOut) carry no "
            f"usage (the exporter writes 0) — {USAGE} read as missing"
        )
    return out, notes
