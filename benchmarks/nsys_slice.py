"""Cut a time window out of an Nsight Systems SQLite export (how examples/h100_2gpu_slice.sqlite was made).

    python benchmarks/nsys_slice.py h100_2gpu_1s.sqlite examples/h100_2gpu_slice.sqlite 155400000000 155500000000

Keeps the tables ingest reads: the GPU activities and host syncs that start in [START, END) ns,
the runtime calls that launched them (same correlation id and process) or start in that span
of launches, the NVTX ranges overlapping it; StringIds, TARGET_INFO_GPU and the ENUM tables whole;
META_DATA_EXPORT's product and schema rows only (the others name the author's paths and host).
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

GPU = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
TIMED = (*GPU, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
HOST = ("CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")
WHOLE = ("StringIds", "TARGET_INFO_GPU", "ENUM_CUDA_MEMCPY_OPER", "ENUM_CUDA_MEM_KIND", "ENUM_CUPTI_SYNC_TYPE")


def main(source: str, target: str, start: int, end: int) -> None:
    Path(target).unlink(missing_ok=True)
    db = sqlite3.connect(target)
    db.execute("ATTACH DATABASE ? AS src", (f"file:{source}?mode=ro",))
    schema = dict(db.execute("SELECT name, sql FROM src.sqlite_master WHERE type = 'table'").fetchall())
    window = f"start >= {int(start)} AND start < {int(end)}"
    gpu = " UNION ".join(
        f'SELECT correlationId AS c, globalPid >> 24 AS p FROM src."{t}" WHERE {window}' for t in GPU if t in schema
    )
    lo, hi = db.execute(
        f"""SELECT min(r.start), max(r."end") FROM src.CUPTI_ACTIVITY_KIND_RUNTIME r
        JOIN ({gpu}) g ON g.c = r.correlationId AND g.p = r.globalTid >> 24"""
    ).fetchone()
    host_where = {
        "CUPTI_ACTIVITY_KIND_RUNTIME": f'WHERE start >= {lo} AND "end" <= {hi}',
        "NVTX_EVENTS": f'WHERE start <= {hi} AND "end" >= {lo}',
    }
    for table in (*TIMED, *HOST, *WHOLE, "META_DATA_EXPORT"):
        if table not in schema:
            continue
        db.execute(schema[table])
        where = ""
        if table in TIMED:
            where = f"WHERE {window}"
        elif table in HOST:
            where = host_where[table]
        elif table == "META_DATA_EXPORT":
            where = "WHERE name LIKE 'EXPORT_PRODUCT_%' OR name LIKE 'EXPORT_SCHEMA_%'"
        db.execute(f'INSERT INTO main."{table}" SELECT * FROM src."{table}" {where}')
    db.commit()
    db.execute("DETACH DATABASE src")
    db.execute("VACUUM")
    db.close()


if __name__ == "__main__":
    if len(sys.argv) != 5 or not (sys.argv[3].isdigit() and sys.argv[4].isdigit()):
        print(__doc__)
        sys.exit(0 if sys.argv[1:] in (["--help"], ["-h"]) else 2)
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
