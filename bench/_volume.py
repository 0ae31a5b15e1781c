"""A tenant at volume in bulk: `runs` runs and about 20 events each, with the rows ingest
derives from them, written by set-based SQL (one `INSERT ... SELECT ... generate_series` per
table) for `bench/pages.py`'s volume part.

What each run holds (its number g, 1 = the oldest, decides everything through `hashint8(g)`,
so the children are derived from the run rows alone and two seedings agree):
- 12 agents, max(100, runs / 500) principals in 8 teams (5% of runs without one),
  max(50, runs / 20) conversations (30% without one); runs spread evenly over the 90 days to
  the seeding, the newest last;
- 3-5 steps (model, tokens, cost; the run's totals and `usage_by_model` are their sums), a
  user message, one assistant message and one tool result per step and a closing message;
  4 × steps + 4 events (4 × steps + 1 for a run still going): 20 a run on average;
- the last day's runs: 30% awaiting approval (one pending call each, expiring in 30 days:
  ~3,300 pending at 1,000,000 runs), 10% running; older runs done (85%), failed (8%) or
  aborted (7%), and 20% of them had a call held and decided (approved 70%, denied 20%,
  expired 10%); 5% of runs hold a flagged or blocked verdict;
- the usage rollups (`runs_usagedaily`, and `runs_usagedailyby` from them) are what ingest's
  additive upserts leave for those steps: one row per UTC day, principal, agent and model,
  summed from the steps.

Loading is honest but fast: one transaction per tenant (all or nothing, so a tenant that
exists is complete), `synchronous_commit` off, FK triggers off for the session
(`session_replication_role = replica`: the rows are consistent by construction), and, for a
large load, the loaded tables' secondary indexes and unique constraints dropped first and
recreated from their own definitions (`pg_get_indexdef` / `pg_get_constraintdef`) in the
same transaction, so the schema ends exactly as the migrations made it. Then VACUUM ANALYZE
(what autovacuum would have done: statistics and the visibility map).
"""

from __future__ import annotations

import time

AGENTS = 12
TEAMS = 8
MODELS = ("model-small", "model-large", "model-fallback")
HELD_TOOLS = ("send_email", "refund_payment", "run_sql")
TOOLS = ("lookup_invoice", "create_ticket", "web_fetch", "search_docs")
TABLES = (
    "runs_run",
    "runs_step",
    "runs_message",
    "runs_toolresult",
    "runs_runevent",
    "runs_verdict",
    "runs_turnverdict",
    "approvals_approval",
    "runs_usagedaily",
    "runs_usagedailyby",
)
BIG_LOAD_RUNS = 50_000  # from this many runs, indexes are dropped and rebuilt around the load


def tenant_counts(slug: str) -> dict | None:
    """{"runs", "events", "pending"} of the tenant, or None when it does not exist."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT id FROM console_tenant WHERE slug = %s", [slug])
        row = cur.fetchone()
        if row is None:
            return None
        cur.execute(
            """SELECT (SELECT count(*) FROM runs_run WHERE tenant_id = %(t)s),
                      (SELECT count(*) FROM runs_runevent e JOIN runs_run r ON r.id = e.run_id
                        WHERE r.tenant_id = %(t)s),
                      (SELECT count(*) FROM approvals_approval
                        WHERE tenant_id = %(t)s AND status = 'pending')""",
            {"t": row[0]},
        )
        runs, events, pending = cur.fetchone()
    return {"runs": runs, "events": events, "pending": pending}


def tenant_runs(slug: str) -> int:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM runs_run r JOIN console_tenant t ON t.id = r.tenant_id "
            "WHERE t.slug = %s",
            [slug],
        )
        return cur.fetchone()[0]


def _indexes(cur, tables) -> list[tuple[str, str, str]]:
    """(table, the DROP, the CREATE) of every index of `tables` but the primary keys: unique
    constraints as constraints, the rest as indexes, each from its own definition."""
    cur.execute(
        """
        SELECT t.relname, ic.relname, pg_get_indexdef(i.indexrelid), con.conname,
               pg_get_constraintdef(con.oid)
        FROM pg_index i
        JOIN pg_class t ON t.oid = i.indrelid
        JOIN pg_class ic ON ic.oid = i.indexrelid
        LEFT JOIN pg_constraint con ON con.conindid = i.indexrelid AND con.contype = 'u'
        WHERE t.relname = ANY(%s) AND NOT i.indisprimary
        ORDER BY t.relname, ic.relname
        """,
        [list(tables)],
    )
    found = []
    for table, index, indexdef, constraint, constraintdef in cur.fetchall():
        if constraint:
            alter = f'ALTER TABLE "{table}"'
            found.append((table, f'{alter} DROP CONSTRAINT "{constraint}"',
                          f'{alter} ADD CONSTRAINT "{constraint}" {constraintdef}'))  # fmt: skip
        else:
            found.append((table, f'DROP INDEX "{index}"', indexdef))
    return found


def seed(slug: str, runs: int, *, days: int = 90, say=print) -> dict:
    """Seed the tenant `slug` with `runs` runs (and everything above) unless it exists; returns
    {"seconds", "steps": [(label, seconds)]}. One transaction: an interrupted seeding leaves
    nothing behind."""
    from django.db import connection, transaction

    from console.directory.services import tenant_create
    from console.models import Principal, Team, Tenant
    from runs.models import Agent
    from runs.services.usage import usage_by_rebuild

    timings: list[tuple[str, float]] = []
    started = time.perf_counter()
    big = runs >= BIG_LOAD_RUNS
    principals = max(100, runs // 500)
    conversations = max(50, runs // 20)
    with transaction.atomic(), connection.cursor() as cur:
        if Tenant.objects.filter(slug=slug).exists():
            raise RuntimeError(f"tenant '{slug}' exists: drop the bench database to reseed")
        cur.execute("SET LOCAL synchronous_commit = off")
        cur.execute("SET LOCAL session_replication_role = replica")
        cur.execute("SET LOCAL work_mem = '256MB'")
        cur.execute("SET LOCAL maintenance_work_mem = '1GB'")

        def step(label: str, sql: str, params=None) -> None:
            at = time.perf_counter()
            cur.execute(sql, params)
            timings.append((label, time.perf_counter() - at))
            say(f"  {label}: {cur.rowcount if cur.rowcount >= 0 else ''} "
                f"({timings[-1][1]:.1f} s)", flush=True)  # fmt: skip

        tenant, _ = tenant_create(slug=slug)
        t = tenant.pk
        teams = [
            Team.objects.get_or_create(tenant=tenant, name=f"team-{i}")[0] for i in range(TEAMS)
        ]
        Agent.objects.bulk_create(
            [Agent(tenant=tenant, external_id=f"agent-{i:02d}") for i in range(AGENTS)]
        )
        step(
            "principals",
            """INSERT INTO console_principal (tenant_id, external_id, name, email, is_active,
                   reviewed, created_at, scim_external_id)
               SELECT %s, 'user' || lpad(g::text, 5, '0') || '@example.com', 'User ' || g,
                      'user' || g || '@example.com', true, true, now(), ''
               FROM generate_series(1, %s) g""",
            [t, principals],
        )
        cur.execute(
            """INSERT INTO console_principal_teams (principal_id, team_id)
               SELECT p.id, (%s::bigint[])[1 + p.id %% %s]
               FROM console_principal p WHERE p.tenant_id = %s""",
            [[team.pk for team in teams], TEAMS, t],
        )
        step(
            "conversations",
            """INSERT INTO runs_conversation (tenant_id, external_id, created_at)
               SELECT %s, 'conv_' || lpad(g::text, 7, '0'), now() FROM generate_series(1, %s) g""",
            [t, conversations],
        )
        agent_ids = list(
            Agent.objects.filter(tenant=tenant).order_by("pk").values_list("pk", "external_id")
        )
        principal_ids = list(
            Principal.objects.filter(tenant=tenant).order_by("pk").values_list("pk", flat=True)
        )
        cur.execute("SELECT id FROM runs_conversation WHERE tenant_id = %s ORDER BY id", [t])
        conversation_ids = [row[0] for row in cur.fetchall()]

        dropped = []
        if big:
            dropped = _indexes(cur, TABLES)
            at = time.perf_counter()
            for _table, drop, _create in dropped:
                cur.execute(drop)
            timings.append(("drop indexes", time.perf_counter() - at))
            say(f"  dropped {len(dropped)} indexes and unique constraints", flush=True)

        # The run's facts from its number g: h (a hash), s (steps), its status, its time.
        facts = f"""
            FROM generate_series(1, %(n)s::bigint) g
            CROSS JOIN LATERAL (SELECT hashint8(g) & 2147483647 AS h) x
            CROSS JOIN LATERAL (SELECT 3 + (x.h / 7) %% 3 AS s,
                CASE WHEN g > %(n)s - %(n)s / {days} THEN
                    CASE WHEN (x.h / 13) %% 100 < 30 THEN 'awaiting_approval'
                         WHEN (x.h / 13) %% 100 < 40 THEN 'running' ELSE 'done' END
                ELSE CASE WHEN (x.h / 13) %% 100 < 85 THEN 'done'
                          WHEN (x.h / 13) %% 100 < 93 THEN 'failed' ELSE 'aborted' END
                END AS status,
                %(now)s - (%(n)s - g) * (interval '1 day' * {days} / %(n)s)
                    - (x.h %% 60) * interval '1 second' AS started) f
        """
        params = {"t": t, "n": runs, "now": tenant.created_at, "agents": [a for a, _ in agent_ids],
                  "agent_names": [n for _, n in agent_ids], "principals": principal_ids,
                  "conversations": conversation_ids, "models": list(MODELS)}  # fmt: skip
        # Each step k of a run: its model and usage (the same expressions for the run's sums).
        usage = """(SELECT jsonb_object_agg(m, jsonb_build_object('input_tokens', i,
                        'output_tokens', o, 'cost_minor_units', c)) AS by_model,
                        sum(i) AS i, sum(o) AS o, sum(c) AS c
                    FROM (SELECT (%(models)s::text[])[1 + (g + k) %% 3] AS m,
                                 sum(200 + (g * 7919 + k * 104729) %% 3800) AS i,
                                 sum(20 + (g * 31 + k * 613) %% 780) AS o,
                                 sum(1 + (g * 13 + k * 7) %% 60) AS c
                          FROM generate_series(1, f.s) k GROUP BY 1) per_model)"""
        step(
            "runs",
            f"""INSERT INTO runs_run (tenant_id, external_id, agent_id, agent_version,
                    current_agent_id, principal_id, role_ids, conversation_id, status, input,
                    limits, input_tokens, output_tokens, cost_minor_units, usage_by_model, steps,
                    last_seq, todos, snapshot_digest, started_at, finished_at, updated_at,
                    finish_reason, error)
                SELECT %(t)s, 'vol_' || lpad(g::text, 8, '0'),
                    (%(agents)s::bigint[])[1 + x.h %% {AGENTS}], 1 + g %% 3,
                    (%(agent_names)s::text[])[1 + x.h %% {AGENTS}],
                    CASE WHEN (x.h / 17) %% 20 = 0 THEN NULL ELSE
                        (%(principals)s::bigint[])[1 + (x.h / 19) %% {principals}] END,
                    '["viewer"]'::jsonb,
                    CASE WHEN (x.h / 23) %% 10 < 3 THEN NULL ELSE
                        (%(conversations)s::bigint[])[1 + (x.h / 29) %% {conversations}] END,
                    f.status, jsonb_build_object('ask', 'Where is my invoice number ' || g || '?'),
                    '{{"maxSteps": 20, "costCeilingMinorUnits": 500}}'::jsonb, u.i, u.o, u.c,
                    u.by_model, f.s,
                    CASE WHEN f.status IN ('running', 'awaiting_approval') THEN 4 * f.s + 1
                         ELSE 4 * f.s + 4 END,
                    '[]'::jsonb, '', f.started,
                    CASE WHEN f.status IN ('running', 'awaiting_approval') THEN NULL
                         ELSE f.started + (4 * f.s + 4) * interval '2 seconds' END,
                    f.started + (4 * f.s + 4) * interval '2 seconds',
                    CASE f.status WHEN 'done' THEN 'stop' WHEN 'aborted' THEN 'aborted'
                         WHEN 'failed' THEN 'error' END,
                    CASE WHEN f.status = 'failed' THEN
                        '{{"code": "tool_failed", "message": "the tool kept failing"}}'::jsonb END
                {facts}
                CROSS JOIN LATERAL {usage} u
                ORDER BY g""",
            params,
        )
        # Children: from the run rows, g back from the external id.
        runs_of = """FROM runs_run r
            CROSS JOIN LATERAL (SELECT substr(r.external_id, 5)::bigint AS g) gg
            CROSS JOIN LATERAL (SELECT gg.g, hashint8(gg.g) & 2147483647 AS h) x"""
        mine = f"r.tenant_id = {int(t)}"
        held = (
            "(r.status = 'awaiting_approval' "
            "OR (r.finished_at IS NOT NULL AND (x.h / 31) % 100 < 20))"
        )
        step(
            "steps",
            f"""INSERT INTO runs_step (run_id, number, agent_id, model, input_tokens,
                    output_tokens, cost_minor_units, finish_reason, trace_id, started_at,
                    finished_at)
                SELECT r.id, k, r.current_agent_id, (%(models)s::text[])[1 + (x.g + k) %% 3],
                    200 + (x.g * 7919 + k * 104729) %% 3800, 20 + (x.g * 31 + k * 613) %% 780,
                    1 + (x.g * 13 + k * 7) %% 60, 'tool_calls', 'trace-' || x.g || '-' || k,
                    r.started_at + (4 * k - 2) * interval '2 seconds',
                    r.started_at + (4 * k + 1) * interval '2 seconds'
                {runs_of.replace("%", "%%")}
                CROSS JOIN LATERAL generate_series(1, r.steps) k WHERE {mine}""",
            params,
        )
        step(
            "messages",
            f"""INSERT INTO runs_message (run_id, position, step, role, content, tool_calls,
                    tool_call_id, created_at)
                SELECT r.id, j, CASE WHEN j = 0 THEN 1 WHEN j > r.steps THEN r.steps ELSE j END,
                    CASE WHEN j = 0 THEN 'user' ELSE 'assistant' END,
                    CASE WHEN j = 0 THEN to_jsonb(r.input ->> 'ask')
                         WHEN j > r.steps THEN '"Done: here is what I found."'::jsonb
                         ELSE '"Let me check that."'::jsonb END,
                    CASE WHEN j BETWEEN 1 AND r.steps THEN jsonb_build_array(jsonb_build_object(
                        'id', 'call_' || x.g || '_' || j, 'name', 'lookup_invoice',
                        'arguments', jsonb_build_object('query', 'invoice', 'limit', j))) END,
                    NULL, r.started_at + (4 * j) * interval '2 seconds'
                {runs_of.replace("%", "%%")}
                CROSS JOIN LATERAL generate_series(0,
                    CASE WHEN r.finished_at IS NULL THEN r.steps ELSE r.steps + 1 END) j
                WHERE {mine}""",
            params,
        )
        step(
            "tool results",
            f"""INSERT INTO runs_toolresult (run_id, step, tool_call_id, tool_name, result,
                    is_error, created_at)
                SELECT r.id, k, 'call_' || x.g || '_' || k, 'lookup_invoice',
                    '{{"ok": true, "rows": 3}}'::jsonb, false,
                    r.started_at + (4 * k) * interval '2 seconds'
                {runs_of.replace("%", "%%")}
                CROSS JOIN LATERAL generate_series(1, r.steps) k
                WHERE {mine} AND NOT (r.status = 'awaiting_approval' AND k = r.steps)""",
            params,
        )
        events_sql = f"""INSERT INTO runs_runevent (run_id, seq, type, data, at)
            SELECT r.id, j, e.type,
                jsonb_build_object('seq', j, 'type', e.type,
                                   'at', r.started_at + j * interval '2 seconds')
                || CASE e.type
                    WHEN 'message' THEN jsonb_build_object('step', e.k, 'message',
                        jsonb_build_object('role', CASE WHEN j = 1 THEN 'user' ELSE 'assistant' END,
                                           'content', 'Let me check that.'))
                    WHEN 'step.started' THEN jsonb_build_object('step', e.k, 'agentId',
                        r.current_agent_id, 'model', 'model-small')
                    WHEN 'step.finished' THEN jsonb_build_object('step', e.k, 'usage',
                        jsonb_build_object('inputTokens', 1200, 'outputTokens', 300,
                                           'costMinorUnits', 12),
                        'finishReason', 'tool_calls', 'traceId', 'trace-' || x.g || '-' || e.k)
                    WHEN 'tool.result' THEN jsonb_build_object('step', e.k, 'toolCallId',
                        'call_' || x.g || '_' || e.k, 'toolName', 'lookup_invoice',
                        'result', jsonb_build_object('ok', true, 'rows', 3), 'isError', false)
                    WHEN 'approval.requested' THEN jsonb_build_object('step', e.k, 'calls',
                        jsonb_build_array(jsonb_build_object('toolCallId',
                            'call_' || x.g || '_' || e.k, 'toolName', 'send_email')))
                    WHEN 'todos.updated' THEN jsonb_build_object('todos', '[]'::jsonb)
                    ELSE jsonb_build_object('status', r.status, 'finishReason', r.finish_reason)
                   END,
                r.started_at + j * interval '2 seconds'
            {runs_of}
            CROSS JOIN LATERAL generate_series(1, r.last_seq::int) j
            CROSS JOIN LATERAL (SELECT (j - 2) / 4 + 1 AS k,
                CASE WHEN j = 1 THEN 'message'
                     WHEN j <= 4 * r.steps + 1 THEN
                        CASE (j - 2) % 4 WHEN 0 THEN 'step.started' WHEN 1 THEN 'message'
                            WHEN 2 THEN CASE WHEN (j - 2) / 4 + 1 = r.steps AND {held}
                                             THEN 'approval.requested' ELSE 'tool.result' END
                            ELSE 'step.finished' END
                     WHEN j = 4 * r.steps + 2 THEN 'todos.updated'
                     WHEN j = 4 * r.steps + 3 THEN 'message'
                     ELSE 'run.finished' END AS type) e
            WHERE {mine}"""
        step("events", events_sql)
        step(
            "approvals",
            f"""INSERT INTO approvals_approval (tenant_id, public_id, run_id, step, position,
                    tool_call_id, tool_name, arguments, reason, rejection_message, status,
                    requested_at, expires_at, decided_by_id, decided_at, message,
                    decision_seq, delivered_at)
                SELECT r.tenant_id,
                    'apr_' || substr(md5(r.tenant_id::text || ':' || r.id::text), 1, 24), r.id,
                    r.steps, 0, 'call_' || x.g || '_' || r.steps,
                    (%(held_tools)s::text[])[1 + (x.h / 37) %% 3],
                    jsonb_build_object('to', 'customer' || x.g || '@example.com',
                                       'subject', 'About your invoice'),
                    'needs a human', 'A reviewer declined this call.', d.status,
                    r.started_at + (4 * r.steps) * interval '2 seconds',
                    CASE WHEN d.status = 'pending' THEN %(now)s + interval '30 days'
                         ELSE r.started_at + interval '1 hour' END,
                    CASE WHEN d.status IN ('approved', 'denied') THEN
                        (%(principals)s::bigint[])[1 + (x.h / 41) %% {principals}] END,
                    CASE WHEN d.status <> 'pending' THEN r.started_at + (4 * r.steps + 30)
                        * interval '2 seconds' END,
                    CASE WHEN d.status = 'denied' THEN 'A reviewer declined this call.'
                         WHEN d.status = 'expired' THEN 'No reviewer decided in time.' END,
                    CASE WHEN d.status <> 'pending' THEN 1 END,
                    CASE WHEN d.status <> 'pending' THEN r.started_at + (4 * r.steps + 31)
                        * interval '2 seconds' END
                {runs_of.replace("%", "%%")}
                CROSS JOIN LATERAL (SELECT CASE WHEN r.status = 'awaiting_approval' THEN 'pending'
                    WHEN (x.h / 43) %% 10 < 7 THEN 'approved'
                    WHEN (x.h / 43) %% 10 < 9 THEN 'denied' ELSE 'expired' END AS status) d
                WHERE {mine} AND {held.replace("%", "%%")}""",
            {**params, "held_tools": list(HELD_TOOLS)},
        )
        verdict_of = f"""{runs_of} WHERE {mine} AND (x.h / 47) % 100 < 5"""
        step(
            "verdicts",
            f"""INSERT INTO runs_verdict (run_id, turn, verdict, guard, reason, created_at)
                SELECT r.id, r.steps || ':0',
                    CASE WHEN x.h % 2 = 0 THEN 'flagged' ELSE 'blocked' END, 'pii-guard',
                    'the answer quotes an email address', r.started_at
                {verdict_of}""",
        )
        step(
            "turn verdicts",
            f"""INSERT INTO runs_turnverdict (run_id, turn, severity, verdict, guard, reason)
                SELECT r.id, r.steps || ':0', CASE WHEN x.h % 2 = 0 THEN 1 ELSE 2 END,
                    CASE WHEN x.h % 2 = 0 THEN 'flagged' ELSE 'blocked' END,
                    'pii-guard', 'the answer quotes an email address'
                {verdict_of}""",
        )
        step(
            "usage rollups",
            """INSERT INTO runs_usagedaily (tenant_id, day, principal_id, agent_id, model,
                    input_tokens, output_tokens, cost_minor_units, steps)
                SELECT r.tenant_id, (s.finished_at AT TIME ZONE %s)::date,
                    coalesce(p.external_id, ''), a.external_id, s.model, sum(s.input_tokens),
                    sum(s.output_tokens), sum(s.cost_minor_units), count(*)
                FROM runs_step s JOIN runs_run r ON r.id = s.run_id
                JOIN runs_agent a ON a.id = r.agent_id
                LEFT JOIN console_principal p ON p.id = r.principal_id
                WHERE r.tenant_id = %s
                GROUP BY 1, 2, 3, 4, 5""",
            [tenant.time_zone, t],
        )
        at = time.perf_counter()
        usage_by_rebuild(tenant_id=t)  # and by one dimension, as ingest adds to both
        timings.append(("usage rollups by dimension", time.perf_counter() - at))
        if dropped:
            for table in dict.fromkeys(table for table, _drop, _create in dropped):
                at = time.perf_counter()
                for _table, _drop, create in (d for d in dropped if d[0] == table):
                    cur.execute(create)
                timings.append((f"indexes of {table}", time.perf_counter() - at))
                say(f"  indexes of {table} ({timings[-1][1]:.1f} s)", flush=True)
    at = time.perf_counter()
    with connection.cursor() as cur:
        tables = (*TABLES, "console_principal", "console_principal_teams", "runs_conversation")
        for table in tables:
            cur.execute(f"VACUUM ANALYZE {table}")
    timings.append(("vacuum analyze", time.perf_counter() - at))
    say(f"  vacuum analyze ({timings[-1][1]:.1f} s)", flush=True)
    return {"seconds": time.perf_counter() - started, "steps": timings}
