-- The job queue's SQLite schema (version 1). Ads are stored as JSON objects of
-- attribute name -> ClassAd expression text (see _serial.py). A job's ad is its cluster's
-- ad overlaid by its own attributes, minus the cluster attributes it deleted (`masked`,
-- space-separated names, NULL when none).

CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;

-- Counters that only grow, so ids and sequence numbers are never reused, even after the
-- rows that used them are gone.
INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', 1);
INSERT OR IGNORE INTO meta (key, value) VALUES ('next_cluster', 1);
INSERT OR IGNORE INTO meta (key, value) VALUES ('last_seq', 0);

CREATE TABLE IF NOT EXISTS clusters (
    cluster INTEGER PRIMARY KEY,
    owner   TEXT NOT NULL,
    ad      TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS jobs (
    cluster INTEGER NOT NULL,
    proc    INTEGER NOT NULL,
    status  INTEGER NOT NULL,
    owner   TEXT NOT NULL,
    seq     INTEGER NOT NULL,  -- the change that last touched the job
    ad      TEXT NOT NULL,     -- the proc's own attributes
    masked  TEXT,
    PRIMARY KEY (cluster, proc)
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs (status);
CREATE INDEX IF NOT EXISTS jobs_by_owner ON jobs (owner COLLATE NOCASE);
CREATE INDEX IF NOT EXISTS jobs_by_seq ON jobs (seq);

-- Late materialization (_factory.py): a cluster's procs not yet made into jobs. The
-- factory's next proc id moves on in the transaction that makes the procs.
CREATE TABLE IF NOT EXISTS factories (
    cluster         INTEGER PRIMARY KEY,
    owner           TEXT NOT NULL,
    status          INTEGER NOT NULL,  -- the status its procs are submitted in
    next_proc       INTEGER NOT NULL,  -- JobMaterializeNextProcId
    total           INTEGER NOT NULL,  -- the procs it makes in all
    max_materialize INTEGER,           -- JobMaterializeLimit
    max_idle        INTEGER,           -- JobMaterializeMaxIdle
    paused          INTEGER NOT NULL,  -- JobMaterializePaused
    pause_reason    TEXT               -- JobMaterializePauseReason (_store adds it to older)
);

-- The procs of a factory, not yet made, that have attributes or a status of their own
-- (the others are their cluster ad alone).
CREATE TABLE IF NOT EXISTS factory_procs (
    cluster INTEGER NOT NULL,
    proc    INTEGER NOT NULL,
    status  INTEGER NOT NULL,
    ad      TEXT NOT NULL,
    PRIMARY KEY (cluster, proc)
) WITHOUT ROWID;

-- Jobs that left the queue, newest last (`id` is the order they left in).
CREATE TABLE IF NOT EXISTS history_clusters (
    cluster INTEGER PRIMARY KEY,
    ad      TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS history (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    cluster INTEGER NOT NULL,
    proc    INTEGER NOT NULL,
    status  INTEGER NOT NULL,
    owner   TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    ad      TEXT NOT NULL,
    masked  TEXT,
    UNIQUE (cluster, proc)
);

CREATE INDEX IF NOT EXISTS history_by_status ON history (status);
CREATE INDEX IF NOT EXISTS history_by_owner ON history (owner COLLATE NOCASE);

-- The change feed: one row per committed change of a job (a whole cluster for a submit,
-- first_proc..last_proc). `attrs` holds the attributes the change set, `deleted` the
-- names it removed.
CREATE TABLE IF NOT EXISTS changes (
    seq         INTEGER PRIMARY KEY,
    time        INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    cluster     INTEGER NOT NULL,
    first_proc  INTEGER NOT NULL,
    last_proc   INTEGER NOT NULL,
    status      INTEGER,
    last_status INTEGER,
    attrs       TEXT NOT NULL,
    deleted     TEXT NOT NULL
);

-- Rows the queue could not read when it opened, set aside so that it serves the rest
-- (_quarantine.py): the table each came from, its job, why, and its columns as they
-- were (a JSON object), to repair and put back by hand.
CREATE TABLE IF NOT EXISTS quarantine (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    time    INTEGER NOT NULL,
    source  TEXT NOT NULL,
    cluster INTEGER,
    proc    INTEGER,
    owner   TEXT,
    reason  TEXT NOT NULL,
    data    TEXT NOT NULL
);
