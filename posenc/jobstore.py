"""Job records in Redis: the one source of truth for a job's public state.

Shared by the gateway (create, read, list, cancel) and the workers (claim, progress, finish, recovery), so it
lives in ``posenc`` and is torch-free. Celery's own task states are never read: Celery answers PENDING for an
id it does not know, so the record is written as ``queued`` before the task is published.

Keys (all under ``posenc:``):

- ``job:{id}``            hash: the record (JSON values for spec, progress, result, artifacts); TTL job_ttl_s
- ``job:{id}:tomb``       small JSON kept job_tombstone_ttl_s longer, so GET can say ``expired``
- ``job:{id}:lease``      the running attempt's fencing token, with a short TTL its worker keeps refreshing
- ``job:{id}:fence``      counter: every claim gets a larger token; writes carrying an older one are refused
- ``job:{id}:cancel``     cancel flag, checked by the running attempt
- ``job:{id}:events``     list of state transitions (what happened to the job, for operators and tests)
- ``jobs:index``          zset id -> created_at (ms): listing every job (admin keys)
- ``jobs:active``         set of ids that were claimed and not finished: what the recovery sweep looks at
- ``owner:{owner}:jobs``  zset id -> created_at (ms): one owner's jobs, so a key lists its own without a scan
- ``owner:{owner}:active`` set of the owner's queued or running ids: the per-key concurrency count
- ``idem:{owner}:{sha256}`` Idempotency-Key -> {job_id, body_sha256}, SET NX, one namespace per owner
  (the anonymous owner keeps the older ``idem:{sha256}``)
- ``workers``             zset hostname -> heartbeat deadline (s); ``workers:info`` hash hostname -> JSON
- ``jobs:taken``          hash id -> worker instance: the job's message was taken by that worker's consumer and
  not claimed yet (the claim removes it). Closes the gap the lease cannot see: between taking and claiming
- ``jobs:queued``         zset id -> last (re)publish (ms) of every queued job: the lost-message sweep's
  candidates (the claim, cancel and failure scripts remove the id; a requeue sets it anew)
- ``worker:{instance}:alive`` set with a TTL by the worker's heartbeat (and on every take); one instance per
  worker *process* (hostname plus a per-start token), so a restarted worker with the same hostname is not
  mistaken for the one that died
- ``jobs:parked``         zset id -> when it was last woken (ms; 0: not since it parked) of every benchmark that
  fanned out and waits for its runs (see "Benchmarks that fan out" below)

Two keys belong to kombu's Redis transport (Celery's broker), not to posenc: ``unacked`` (hash delivery tag ->
JSON [message, exchange, routing key]) and ``unacked_index`` (zset delivery tag -> time taken). The recovery
sweep reads them, and removes only entries whose job is terminal (see :meth:`JobStore.settle_unacked`).

Every transition that must happen once (create, claim, finish, cancel, requeue) is a Lua script, so it is
atomic and the checks (status, lease, fence, the owner's count) and the write cannot interleave with another
process.

Benchmarks that fan out: a benchmark of several (method, seed) runs is a *parent* job whose runs are *child*
jobs, each a job of its own (claim and fence, lease, every sweep, the attempt cap), so the guarantees above hold
for each run. The parent's first attempt creates the children and *parks* (:meth:`JobStore.park`, one script):
one record per distinct run (``parent``: the parent's id, ``run``: its method label, index and seed, the
parent's spec, owner and queue), listed in the parent's ``children`` field; the parent stays ``running`` but
gives up its lease and leaves ``jobs:active`` (no lease sweep for it) for ``jobs:parked``. Children are not in
the listing indexes nor in their owner's active set (the parent is the one job that counts). When a child ends
it calls :meth:`JobStore.child_ended` (one script): a child that failed or was cancelled cancels its open
siblings, and once every child has ended the parent is *woken* (its wake time set; one caller wins) and that
caller publishes it. Its next attempt finds every child ended (:meth:`JobStore.park` answers ``ready``) and
puts the runs together. A wake lost (the waker died before publishing, the message lost) is redone by the sweep
(:meth:`JobStore.wake_parent`) once ``job_publish_grace_s`` has passed with the parent's message nowhere. An
attempt that ended by parking does not count against the attempt cap (``parked_attempts``). Cancelling the
parent cancels its queued children at once and flags the running ones; the parent ends cancelled when the last
has ended (at once if none was running). Each record carries the ``priority`` its message is published with;
the recovery sweep publishes a job again one priority step above it, so a recovered job is claimed before the
jobs queued after it first was (``workers.recovery``, "Place in the queue").

Owners: a job belongs to the API key that created it, recorded as the field ``owner`` (a prefix of the key's
SHA-256 digest, never the key; ``anonymous`` without keys; a record without the field is ``anonymous``). Every
script that ends a job also takes it out of its owner's active set, reading the owner from the record; the
create script prunes the set of ids whose record ended or expired, so the count cannot leak whatever way a job
ended. Those scripts touch keys derived from the record (the owner's set, the pruned records) that are not
declared in KEYS: fine on one Redis or Sentinel; Redis Cluster would need the keys hash-tagged, which the
scripts above never needed either (``jobs:active`` and a job's keys live in different slots).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import redis
from kombu.transport import redis as kombu_redis

from posenc.schemas.jobs import (
    SUMMARY_ERROR_CHARS,
    TERMINAL_STATUSES,
    Artifact,
    Job,
    JobChild,
    JobProgress,
    JobSummary,
)
from posenc.settings import Settings

PREFIX = "posenc:"
INDEX_KEY = PREFIX + "jobs:index"
ACTIVE_KEY = PREFIX + "jobs:active"
# queued jobs whose task message is not known to be published yet, scored by when they were queued (ms)
UNPUBLISHED_KEY = PREFIX + "jobs:unpublished"
WORKERS_KEY = PREFIX + "workers"
WORKERS_INFO_KEY = PREFIX + "workers:info"
TAKEN_KEY = PREFIX + "jobs:taken"
# queued jobs, scored by when their message was last (re)published (ms): the lost-message sweep's candidates
QUEUED_KEY = PREFIX + "jobs:queued"
# benchmarks waiting for their runs, scored by when they were last woken (ms; 0: not woken since they parked)
PARKED_KEY = PREFIX + "jobs:parked"
THROUGHPUT_KEY = PREFIX + "throughput"  # hash: queue -> multiply-adds per second, a moving average
# kombu's Redis transport keeps every delivered, unacknowledged message here (its defaults: Celery's
# configuration in workers.app sets no global_keyprefix and no other names).
KOMBU_UNACKED_KEY = "unacked"
KOMBU_UNACKED_INDEX_KEY = "unacked_index"
# A queue's messages wait in one list per priority step: the queue's name for priority 0, name + sep + step else.
KOMBU_PRIORITY_STEPS = tuple(kombu_redis.PRIORITY_STEPS)
KOMBU_PRIORITY_SEP = kombu_redis.Channel.sep
OWNER_PREFIX = PREFIX + "owner:"
ANONYMOUS = "anonymous"  # the one owner when no API keys are configured
CHECKPOINT_DIR_NAME = "checkpoints"

Redis = redis.Redis


def record_key(job_id: str) -> str:
    return f"{PREFIX}job:{job_id}"


def _keys(job_id: str) -> dict[str, str]:
    base = record_key(job_id)
    return {
        "record": base,
        "tomb": base + ":tomb",
        "lease": base + ":lease",
        "fence": base + ":fence",
        "cancel": base + ":cancel",
        "events": base + ":events",
    }


def worker_alive_key(instance: str) -> str:
    return f"{PREFIX}worker:{instance}:alive"


def owner_index_key(owner: str) -> str:
    return f"{OWNER_PREFIX}{owner}:jobs"


def owner_active_key(owner: str) -> str:
    return f"{OWNER_PREFIX}{owner}:active"


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def new_job_id() -> str:
    return uuid.uuid4().hex


# ---------------------------------------------------------------------------------------------- connections

_clients: dict[tuple[str, int], redis.Redis] = {}


def connect(url: str) -> redis.Redis:
    """One client per URL *per process*: a forked Celery child must not share its parent's sockets."""
    key = (url, os.getpid())
    client = _clients.get(key)
    if client is None:
        client = redis.Redis.from_url(
            url, decode_responses=True, socket_connect_timeout=5, socket_timeout=30, health_check_interval=30
        )
        _clients[key] = client
    return client


# ---------------------------------------------------------------------------------------------- Lua scripts

_TERMINAL_LUA = "local terminal = {succeeded=true, failed=true, cancelled=true, expired=true}\n"

# The job (KEYS[1] is its record) no longer counts against its owner's concurrency limit.
_RELEASE_SLOT_LUA = f"""
local function release_slot(record, job_id)
  local owner = redis.call('HGET', record, 'owner') or '{ANONYMOUS}'
  redis.call('SREM', '{OWNER_PREFIX}' .. owner .. ':active', job_id)
end
"""

# A benchmark that fanned out (its record, KEYS-wise, passed in) and its children, whose keys derive from the
# ids in its ``children`` field (not declared in KEYS, like the owner's set above). Needs _TERMINAL_LUA.
_FAMILY_LUA = f"""
local function children_of(record)
  local raw = redis.call('HGET', record, 'children')
  if not raw then return nil end
  local ids = {{}}
  for _, child in ipairs(cjson.decode(raw)) do ids[#ids + 1] = child['id'] end
  return ids
end
local function open_children(ids)
  local open = 0
  for _, id in ipairs(ids) do
    local status = redis.call('HGET', '{PREFIX}job:' .. id, 'status')
    if status and not terminal[status] then open = open + 1 end
  end
  return open
end
-- queued children end cancelled at once; running ones get their cancel flag (once) and stop within a few steps
local function stop_children(ids, now, ttl, why)
  for _, id in ipairs(ids) do
    local child = '{PREFIX}job:' .. id
    local status = redis.call('HGET', child, 'status')
    if status == 'queued' then
      redis.call('SET', child .. ':cancel', '1', 'EX', ttl)
      redis.call('HSET', child, 'status', 'cancelled', 'finished_at', now, 'updated_at', now)
      redis.call('SREM', '{ACTIVE_KEY}', id)
      redis.call('ZREM', '{QUEUED_KEY}', id)
      redis.call('RPUSH', child .. ':events', 'cancelled while queued (' .. why .. ')|' .. now)
    elseif status and not terminal[status] and redis.call('EXISTS', child .. ':cancel') == 0 then
      redis.call('SET', child .. ':cancel', '1', 'EX', ttl)
      redis.call('RPUSH', child .. ':events', 'cancel requested (' .. why .. ')|' .. now)
    end
  end
end
-- A parked parent whose children have all ended is woken once per grace: the caller publishes it.
local function wake(parked, record, lease, events, job_id, now_ms, grace_ms, now, priority)
  local woken = redis.call('ZSCORE', parked, job_id)
  if not woken then return 'gone' end
  local status = redis.call('HGET', record, 'status')
  if not status or terminal[status] then
    redis.call('ZREM', parked, job_id)
    return 'gone'
  end
  if redis.call('EXISTS', lease) == 1 then return 'held' end
  local ids = children_of(record)
  if ids and open_children(ids) > 0 then return 'open' end
  woken = tonumber(woken)
  if woken > 0 and woken > tonumber(now_ms) - tonumber(grace_ms) then return 'recent' end
  redis.call('ZADD', parked, now_ms, job_id)
  redis.call('HSET', record, 'priority', priority, 'updated_at', now)
  redis.call('RPUSH', events, 'woken: every run has ended|' .. now)
  return 'woken'
end
"""

# KEYS: record tomb events index unpublished owner_index owner_active queued
# ARGV: job_id now now_ms ttl_s tomb_json max_active(0: no limit) horizon_ms tomb_ttl_s field value...
# Returns {'created'} or {'limit', active}. Before counting, ids whose record ended or expired leave the set.
_CREATE = (
    _TERMINAL_LUA
    + f"""
for _, id in ipairs(redis.call('SMEMBERS', KEYS[7])) do
  local status = redis.call('HGET', '{PREFIX}job:' .. id, 'status')
  if not status or terminal[status] then redis.call('SREM', KEYS[7], id) end
end
local active = redis.call('SCARD', KEYS[7])
if tonumber(ARGV[6]) > 0 and active >= tonumber(ARGV[6]) then return {{'limit', tostring(active)}} end
redis.call('HSET', KEYS[1], unpack(ARGV, 9))
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('SET', KEYS[2], ARGV[5], 'EX', ARGV[8])
redis.call('RPUSH', KEYS[3], 'queued|' .. ARGV[2])
redis.call('EXPIRE', KEYS[3], ARGV[4])
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[1])
redis.call('ZADD', KEYS[5], ARGV[3], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', ARGV[7])
redis.call('ZADD', KEYS[6], ARGV[3], ARGV[1])
redis.call('SADD', KEYS[7], ARGV[1])
redis.call('ZADD', KEYS[8], ARGV[3], ARGV[1])
return {{'created'}}
"""
)

# KEYS: record lease fence active events cancel tomb taken queued parked
# ARGV: now worker lease_ms max_attempts job_id ttl_s tomb_ttl_s
# Whatever the outcome, the message reached its task: the taken marker's job is done (from here the lease, or
# the job's end, says what happens next), and a parked benchmark is parked no longer (its attempt parks it
# again if runs are still open). A benchmark with children is not cancelled here: its attempt ends it once its
# runs have ended. Attempts that ended by parking do not count against the cap.
_CLAIM = (
    _TERMINAL_LUA
    + _RELEASE_SLOT_LUA
    + _FAMILY_LUA
    + """
redis.call('HDEL', KEYS[8], ARGV[5])
redis.call('ZREM', KEYS[9], ARGV[5])
redis.call('ZREM', KEYS[10], ARGV[5])
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {'missing'} end
if terminal[status] then return {'terminal', status} end
if redis.call('EXISTS', KEYS[2]) == 1 then return {'busy'} end
local children = children_of(KEYS[1])
if redis.call('EXISTS', KEYS[6]) == 1 and not children then
  redis.call('HSET', KEYS[1], 'status', 'cancelled', 'finished_at', ARGV[1], 'updated_at', ARGV[1])
  redis.call('SREM', KEYS[4], ARGV[5])
  release_slot(KEYS[1], ARGV[5])
  redis.call('RPUSH', KEYS[5], 'cancelled before start|' .. ARGV[1])
  return {'terminal', 'cancelled'}
end
local attempts = tonumber(redis.call('HGET', KEYS[1], 'attempts') or '0')
local parked = tonumber(redis.call('HGET', KEYS[1], 'parked_attempts') or '0')
if attempts - parked >= tonumber(ARGV[4]) then
  local msg = 'gave up after ' .. attempts .. ' attempts: the worker running this job was lost every time'
  if children then stop_children(children, ARGV[1], ARGV[6], 'its benchmark failed') end
  redis.call('HSET', KEYS[1], 'status', 'failed', 'error', msg, 'finished_at', ARGV[1], 'updated_at', ARGV[1])
  redis.call('SREM', KEYS[4], ARGV[5])
  release_slot(KEYS[1], ARGV[5])
  redis.call('RPUSH', KEYS[5], 'failed (attempts exhausted)|' .. ARGV[1])
  redis.call('EXPIRE', KEYS[1], ARGV[6])
  redis.call('EXPIRE', KEYS[5], ARGV[6])
  redis.call('EXPIRE', KEYS[7], ARGV[6] + ARGV[7])
  return {'exhausted', tostring(attempts)}
end
local fence = redis.call('INCR', KEYS[3])
redis.call('EXPIRE', KEYS[3], ARGV[6])
redis.call('SET', KEYS[2], fence, 'PX', ARGV[3])
redis.call('HSET', KEYS[1], 'status', 'running', 'fence', fence, 'attempts', attempts + 1,
  'worker', ARGV[2], 'attempt_started_at', ARGV[1], 'updated_at', ARGV[1])
if not redis.call('HGET', KEYS[1], 'started_at') then redis.call('HSET', KEYS[1], 'started_at', ARGV[1]) end
redis.call('SADD', KEYS[4], ARGV[5])
redis.call('RPUSH', KEYS[5],
  'running attempt ' .. (attempts + 1) .. ' fence ' .. fence .. ' on ' .. ARGV[2] .. '|' .. ARGV[1])
return {'claimed', tostring(fence), tostring(attempts + 1)}
"""
)

# KEYS: record ; ARGV: fence, field, value, field, value...
_UPDATE_IF_OWNER = """
if redis.call('HGET', KEYS[1], 'fence') ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
return 1
"""

# KEYS: record lease active events tomb cancel ; ARGV: fence status now ttl_s tomb_ttl_s job_id field value...
_FINISH = (
    _RELEASE_SLOT_LUA
    + """
if redis.call('HGET', KEYS[1], 'fence') ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'finished_at', ARGV[3], 'updated_at', ARGV[3])
if #ARGV > 6 then redis.call('HSET', KEYS[1], unpack(ARGV, 7)) end
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
redis.call('SREM', KEYS[3], ARGV[6])
release_slot(KEYS[1], ARGV[6])
redis.call('DEL', KEYS[6])
redis.call('RPUSH', KEYS[4], ARGV[2] .. ' fence ' .. ARGV[1] .. '|' .. ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('EXPIRE', KEYS[4], ARGV[4])
redis.call('EXPIRE', KEYS[5], ARGV[4] + ARGV[5])
return 1
"""
)

# KEYS: lease ; ARGV: fence lease_ms
_RENEW_LEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""

# KEYS: record cancel active events queued lease parked ; ARGV: now ttl_s job_id
# A benchmark with children cancels them (queued ones at once, running ones by their flag); it ends cancelled at
# once when none holds it (parked or woken, no lease) and none of its runs is still open.
_CANCEL = (
    _TERMINAL_LUA
    + _RELEASE_SLOT_LUA
    + _FAMILY_LUA
    + """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return 'missing' end
if terminal[status] then return 'terminal' end
redis.call('SET', KEYS[2], '1', 'EX', ARGV[2])
local children = children_of(KEYS[1])
if children then stop_children(children, ARGV[1], ARGV[2], 'its benchmark was cancelled') end
local settled = children and redis.call('EXISTS', KEYS[6]) == 0 and open_children(children) == 0
if status == 'queued' or settled then
  redis.call('HSET', KEYS[1], 'status', 'cancelled', 'finished_at', ARGV[1], 'updated_at', ARGV[1])
  redis.call('SREM', KEYS[3], ARGV[3])
  release_slot(KEYS[1], ARGV[3])
  redis.call('ZREM', KEYS[5], ARGV[3])
  redis.call('ZREM', KEYS[7], ARGV[3])
  local why = status == 'queued' and 'cancelled while queued|' or 'cancelled (no run open)|'
  redis.call('RPUSH', KEYS[4], why .. ARGV[1])
  return 'cancelled'
end
redis.call('RPUSH', KEYS[4], 'cancel requested|' .. ARGV[1])
return 'requested'
"""
)

# KEYS: record lease active events cancel unpublished queued ; ARGV: now job_id now_ms
_REQUEUE_IF_ORPHANED = (
    _TERMINAL_LUA
    + _RELEASE_SLOT_LUA
    + """
local status = redis.call('HGET', KEYS[1], 'status')
if not status or terminal[status] then
  redis.call('SREM', KEYS[3], ARGV[2])
  if status then release_slot(KEYS[1], ARGV[2]) end
  return 'gone'
end
if status ~= 'running' then return 'skip' end
if redis.call('EXISTS', KEYS[2]) == 1 then return 'alive' end
if redis.call('EXISTS', KEYS[5]) == 1 and redis.call('HEXISTS', KEYS[1], 'children') == 0 then
  redis.call('HSET', KEYS[1], 'status', 'cancelled', 'finished_at', ARGV[1], 'updated_at', ARGV[1])
  redis.call('SREM', KEYS[3], ARGV[2])
  release_slot(KEYS[1], ARGV[2])
  redis.call('RPUSH', KEYS[4], 'cancelled (worker lost after the cancel request)|' .. ARGV[1])
  return 'cancelled'
end
redis.call('HSET', KEYS[1], 'status', 'queued', 'updated_at', ARGV[1], 'requeued_ms', ARGV[3])
redis.call('ZADD', KEYS[6], ARGV[3], ARGV[2])
redis.call('ZADD', KEYS[7], ARGV[3], ARGV[2])
redis.call('RPUSH', KEYS[4], 'requeued (lease expired)|' .. ARGV[1])
return 'requeued'
"""
)

# KEYS: taken alive record events ; ARGV: job_id instance alive_ms now
# The consumer of a live worker (instance) took the job's message; the worker is alive right now, so its
# liveness key is refreshed in the same step (the marker can never name an instance without a liveness key).
# KEYS: taken ; ARGV: instance. A worker stopping cleanly gives back the marks of messages it took and never
# claimed: kombu restores those messages to the queue itself at shutdown, so the sweep must not publish them again.
_RELEASE_TAKEN = """
local entries = redis.call('HGETALL', KEYS[1])
local released = 0
for i = 1, #entries, 2 do
  if entries[i + 1] == ARGV[1] then
    redis.call('HDEL', KEYS[1], entries[i])
    released = released + 1
  end
end
return released
"""

_MARK_TAKEN = """
redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
if redis.call('EXISTS', KEYS[3]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('RPUSH', KEYS[4], 'taken by ' .. ARGV[2] .. '|' .. ARGV[4])
return 1
"""

# KEYS: taken alive record events unpublished queued ; ARGV: job_id instance now now_ms
# The worker instance that took the job's message is gone (its liveness key expired) and never claimed the
# job: the message sits in kombu's unacked hash until the visibility timeout. Requeue it now.
_REQUEUE_IF_UNCLAIMED = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 'moved' end
if redis.call('EXISTS', KEYS[2]) == 1 then return 'alive' end
redis.call('HDEL', KEYS[1], ARGV[1])
if redis.call('HGET', KEYS[3], 'status') ~= 'queued' then return 'gone' end
redis.call('HSET', KEYS[3], 'updated_at', ARGV[3], 'requeued_ms', ARGV[4])
redis.call('ZADD', KEYS[5], ARGV[4], ARGV[1])
redis.call('ZADD', KEYS[6], ARGV[4], ARGV[1])
redis.call('RPUSH', KEYS[4], 'requeued (worker lost before the claim: ' .. ARGV[2] .. ')|' .. ARGV[3])
return 'requeued'
"""

# KEYS: unacked unacked_index record lease taken events unpublished queued
# ARGV: delivery_tag job_id now_ms grace_ms now
# One entry of kombu's unacked hash whose message is this job's:
# - the job is terminal: the entry can only ever redeliver a finished job, hours later: remove it ('dropped');
# - the job is queued, unclaimed, not marked taken, and this entry was taken after the job's last (re)publish
#   and more than grace_ms ago: its consumer died between kombu's unacked write and the taken marker (a
#   window of microseconds, but a real one): requeue the job, keep the entry ('requeued');
# - otherwise leave it to its worker ('kept'). Nothing else is ever removed.
_SETTLE_UNACKED = (
    _TERMINAL_LUA
    + """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 'gone' end
local status = redis.call('HGET', KEYS[3], 'status')
if status and terminal[status] then
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  return 'dropped'
end
if status ~= 'queued' then return 'kept' end
if redis.call('EXISTS', KEYS[4]) == 1 or redis.call('HEXISTS', KEYS[5], ARGV[2]) == 1 then return 'kept' end
local taken_ms = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]) or '0') * 1000
if taken_ms == 0 or taken_ms > tonumber(ARGV[3]) - tonumber(ARGV[4]) then return 'kept' end
if taken_ms <= tonumber(redis.call('HGET', KEYS[3], 'requeued_ms') or '0') then return 'kept' end
redis.call('HSET', KEYS[3], 'updated_at', ARGV[5], 'requeued_ms', ARGV[3])
redis.call('ZADD', KEYS[7], ARGV[3], ARGV[2])
redis.call('ZADD', KEYS[8], ARGV[3], ARGV[2])
redis.call('RPUSH', KEYS[6], 'requeued (worker lost as it took the message)|' .. ARGV[5])
return 'requeued'
"""
)

# KEYS: queued record lease taken unpublished events ; ARGV: job_id now_ms grace_ms now
# A queued job that the caller found in no queue list and no unacked entry. Its message is gone: Redis lost the
# last second of writes (appendfsync everysec) when it was killed, or a consumer died between kombu's BRPOP and
# its unacked write. If the job is still queued, was last (re)published more than grace_ms ago, and no worker
# holds it (no lease, no taken mark) and no publish is pending, publish it again ('requeued'). A job that is no
# longer queued leaves the index ('gone').
_REQUEUE_IF_LOST = """
if redis.call('HGET', KEYS[2], 'status') ~= 'queued' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 'gone'
end
local published_ms = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]) or ARGV[2])
if published_ms > tonumber(ARGV[2]) - tonumber(ARGV[3]) then return 'recent' end
if redis.call('EXISTS', KEYS[3]) == 1 or redis.call('HEXISTS', KEYS[4], ARGV[1]) == 1 then return 'held' end
if redis.call('ZSCORE', KEYS[5], ARGV[1]) then return 'unpublished' end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[5], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[2], 'updated_at', ARGV[4], 'requeued_ms', ARGV[2])
redis.call('RPUSH', KEYS[6], 'requeued (its message was lost: in no queue and held by no worker)|' .. ARGV[4])
return 'requeued'
"""

# KEYS: record lease active events cancel parked unpublished queued
# ARGV: fence job_id now now_ms ttl_s tomb_ttl_s child_priority children_json [child_id run_json]...
# The attempt holding a benchmark (its fence) either finds every run ended ('ready': it keeps its claim and puts
# the runs together) or parks it, creating the children first if it has none (and it was not cancelled before:
# 'cancelled', nothing created). Children are created queued and unpublished: the caller publishes them, or the
# unpublished sweep does if it dies first.
_PARK = (
    _TERMINAL_LUA
    + _FAMILY_LUA
    + f"""
if redis.call('HGET', KEYS[1], 'fence') ~= ARGV[1] then return {{'stale'}} end
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return {{'stale'}} end
local ids = children_of(KEYS[1])
local created = 0
if not ids then
  if redis.call('EXISTS', KEYS[5]) == 1 then return {{'cancelled'}} end
  local owner = redis.call('HGET', KEYS[1], 'owner') or '{ANONYMOUS}'
  local queue = redis.call('HGET', KEYS[1], 'queue') or 'cpu'
  local spec = redis.call('HGET', KEYS[1], 'spec') or '{{}}'
  local tomb = cjson.encode({{kind='benchmark', queue=queue, created_at=ARGV[3], owner=owner}})
  for i = 9, #ARGV, 2 do
    local child = '{PREFIX}job:' .. ARGV[i]
    redis.call('HSET', child, 'id', ARGV[i], 'kind', 'benchmark', 'queue', queue, 'status', 'queued',
      'spec', spec, 'attempts', 0, 'created_at', ARGV[3], 'updated_at', ARGV[3], 'owner', owner,
      'parent', ARGV[2], 'run', ARGV[i + 1], 'priority', ARGV[7])
    redis.call('EXPIRE', child, ARGV[5])
    redis.call('SET', child .. ':tomb', tomb, 'EX', ARGV[5] + ARGV[6])
    redis.call('RPUSH', child .. ':events', 'queued (a run of ' .. ARGV[2] .. ')|' .. ARGV[3])
    redis.call('EXPIRE', child .. ':events', ARGV[5])
    redis.call('ZADD', KEYS[7], ARGV[4], ARGV[i])
    redis.call('ZADD', KEYS[8], ARGV[4], ARGV[i])
    created = created + 1
  end
  redis.call('HSET', KEYS[1], 'children', ARGV[8])
  ids = children_of(KEYS[1])
end
local open = open_children(ids)
if open == 0 then return {{'ready'}} end
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
redis.call('SREM', KEYS[3], ARGV[2])
redis.call('HINCRBY', KEYS[1], 'parked_attempts', 1)
redis.call('HSET', KEYS[1], 'updated_at', ARGV[3])
redis.call('ZADD', KEYS[6], 0, ARGV[2])
redis.call('RPUSH', KEYS[4], 'parked (' .. created .. ' runs created, ' .. open .. ' open)|' .. ARGV[3])
return {{'parked', tostring(created)}}
"""
)

# KEYS: parked record lease events ; ARGV: job_id now_ms grace_ms now priority
_WAKE_PARENT = _TERMINAL_LUA + _FAMILY_LUA + "return wake(KEYS[1], KEYS[2], KEYS[3], KEYS[4], unpack(ARGV))"

# KEYS: parked parent_record parent_lease parent_events child_record
# ARGV: parent_id now_ms grace_ms now priority ttl_s child_id
# A child has ended (or will not run here): one that failed or was cancelled ends its open siblings too (the
# benchmark cannot succeed); then the parent is woken if it is parked and no run is open.
_CHILD_ENDED = (
    _TERMINAL_LUA
    + _FAMILY_LUA
    + """
local status = redis.call('HGET', KEYS[5], 'status')
if not status or status == 'failed' or status == 'cancelled' or status == 'expired' then
  local siblings = children_of(KEYS[2])
  if siblings then
    stop_children(siblings, ARGV[4], ARGV[6], 'run ' .. ARGV[7] .. ' ended ' .. (status or 'expired'))
  end
end
return wake(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
"""
)

# KEYS: record unpublished events queued ; ARGV: now error job_id
_FAIL_UNPUBLISHED = (
    _RELEASE_SLOT_LUA
    + """
redis.call('HSET', KEYS[1], 'status', 'failed', 'error', ARGV[2], 'finished_at', ARGV[1], 'updated_at', ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[3])
release_slot(KEYS[1], ARGV[3])
redis.call('ZREM', KEYS[4], ARGV[3])
redis.call('RPUSH', KEYS[3], 'failed (not published)|' .. ARGV[1])
"""
)

# KEYS: idem ; ARGV: job_id — forget a reservation only if it is still this request's
_RELEASE_IDEMPOTENCY = """
local raw = redis.call('GET', KEYS[1])
if raw and cjson.decode(raw)['job_id'] == ARGV[1] then redis.call('DEL', KEYS[1]) return 1 end
return 0
"""


# ---------------------------------------------------------------------------------------------- the store


class IdempotencyConflict(Exception):
    """The Idempotency-Key was used before with a different request body."""


class IdempotencyInProgress(Exception):
    """The Idempotency-Key belongs to a request that has not finished creating its job yet."""


class ActiveJobsLimit(Exception):
    """The owner already has ``active`` jobs queued or running, at or over ``limit``: nothing was written."""

    def __init__(self, active: int, limit: int) -> None:
        super().__init__(f"{active} jobs queued or running, limit {limit}")
        self.active = active
        self.limit = limit


@dataclass(frozen=True)
class Claim:
    outcome: Literal["claimed", "busy", "terminal", "missing", "exhausted"]
    fence: int = 0
    attempt: int = 0
    status: str | None = None


def body_fingerprint(body: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class JobStore:
    def __init__(
        self,
        client: redis.Redis,
        *,
        ttl_s: int,
        tombstone_ttl_s: int = 30 * 24 * 3600,
        idempotency_ttl_s: int = 24 * 3600,
    ) -> None:
        self.r = client
        self.ttl_s = ttl_s
        self.tombstone_ttl_s = tombstone_ttl_s
        self.idempotency_ttl_s = idempotency_ttl_s
        self._claim = client.register_script(_CLAIM)
        self._update_if_owner = client.register_script(_UPDATE_IF_OWNER)
        self._finish = client.register_script(_FINISH)
        self._renew = client.register_script(_RENEW_LEASE)
        self._cancel = client.register_script(_CANCEL)
        self._requeue = client.register_script(_REQUEUE_IF_ORPHANED)
        self._mark_taken = client.register_script(_MARK_TAKEN)
        self._release_taken = client.register_script(_RELEASE_TAKEN)
        self._requeue_unclaimed = client.register_script(_REQUEUE_IF_UNCLAIMED)
        self._settle_unacked = client.register_script(_SETTLE_UNACKED)
        self._create = client.register_script(_CREATE)
        self._fail_unpublished = client.register_script(_FAIL_UNPUBLISHED)
        self._requeue_lost = client.register_script(_REQUEUE_IF_LOST)
        self._release_idempotency = client.register_script(_RELEASE_IDEMPOTENCY)
        self._park = client.register_script(_PARK)
        self._wake_parent = client.register_script(_WAKE_PARENT)
        self._child_ended = client.register_script(_CHILD_ENDED)

    # ---- gateway side

    def create(
        self,
        job_id: str,
        kind: str,
        spec: Mapping[str, Any],
        queue: str,
        *,
        owner: str = ANONYMOUS,
        max_active: int | None = None,
        priority: int | None = None,
        estimate_s: float | None = None,
    ) -> None:
        """Write the ``queued`` record, its tombstone and index entries, and count it against ``owner``, in one
        script. With ``max_active``, raises :class:`ActiveJobsLimit` (writing nothing) when the owner already has
        that many jobs queued or running: the check and the write cannot interleave with another gateway's.
        ``priority`` is the one its message is published with (again by the sweeps: :meth:`publish_target`)."""
        now, now_ms = now_iso(), int(time.time() * 1000)
        k = _keys(job_id)
        tomb = json.dumps({"kind": kind, "queue": queue, "created_at": now, "owner": owner})
        record: dict[str, str | int] = {
            "id": job_id,
            "kind": kind,
            "queue": queue,
            "status": "queued",
            "spec": json.dumps(dict(spec)),
            "attempts": 0,
            "created_at": now,
            "updated_at": now,
            "owner": owner,
        }
        if priority is not None:
            record["priority"] = priority
        if estimate_s is not None:
            record["estimate_s"] = json.dumps(estimate_s)
        record["methods"] = json.dumps(method_names(spec))
        reply = self._create(
            keys=[
                k["record"],
                k["tomb"],
                k["events"],
                INDEX_KEY,
                UNPUBLISHED_KEY,
                owner_index_key(owner),
                owner_active_key(owner),
                QUEUED_KEY,
            ],
            args=[
                job_id,
                now,
                now_ms,
                self.ttl_s,
                tomb,
                max_active or 0,
                self._listing_horizon_ms(),
                self.ttl_s + self.tombstone_ttl_s,
                *[part for field, value in record.items() for part in (field, value)],
            ],
        )
        if reply[0] == "limit":
            assert max_active is not None
            raise ActiveJobsLimit(int(reply[1]), max_active)

    def active_count(self, owner: str) -> int:
        """Jobs of ``owner`` queued or running, as last counted (ended ones leave the set as they end)."""
        return int(self.r.scard(owner_active_key(owner)))

    def mark_published(self, job_id: str) -> None:
        """The task message is in the broker: from here on the broker (and the lease sweep) own delivery."""
        self.r.zrem(UNPUBLISHED_KEY, job_id)

    def take_unpublished(self, older_than_s: float) -> list[str]:
        """Queued jobs whose message was never confirmed published ``older_than_s`` after they were queued
        (the gateway, or a sweeper, died between writing the record and publishing). Each id is handed to one
        caller only (ZREM decides); the caller publishes it again. A duplicate message is harmless: the task
        claims a job once."""
        cutoff = (time.time() - older_than_s) * 1000
        taken = []
        for job_id in _strs(self.r.zrangebyscore(UNPUBLISHED_KEY, "-inf", cutoff)):
            if self.r.zrem(UNPUBLISHED_KEY, job_id) and self.r.hget(record_key(job_id), "status") == "queued":
                taken.append(job_id)
        return taken

    def fail_unpublished(self, job_id: str, error: str) -> None:
        """The record was written but the message could not be published: say so instead of queued forever."""
        k = _keys(job_id)
        self._fail_unpublished(
            keys=[k["record"], UNPUBLISHED_KEY, k["events"], QUEUED_KEY], args=[now_iso(), error, job_id]
        )

    def reserve_idempotency_key(self, key: str, job_id: str, fingerprint: str, *, owner: str = ANONYMOUS) -> str | None:
        """Bind ``key`` to ``job_id`` in ``owner``'s namespace unless it is bound already; returns the earlier job
        id on a replay. Another owner's use of the same key is a different key: never its job.

        Raises IdempotencyConflict when the key was used with a different body, IdempotencyInProgress when
        the earlier request has not written its record yet.
        """
        redis_key = _idempotency_key(key, owner)
        value = json.dumps({"job_id": job_id, "body": fingerprint})
        if self.r.set(redis_key, value, nx=True, ex=self.idempotency_ttl_s):
            return None
        raw = self.r.get(redis_key)
        if raw is None:  # expired between SET and GET: take it now
            self.r.set(redis_key, value, ex=self.idempotency_ttl_s)
            return None
        earlier = json.loads(raw)
        if earlier["body"] != fingerprint:
            raise IdempotencyConflict(earlier["job_id"])
        if not self.r.exists(record_key(earlier["job_id"])) and not self.r.exists(_keys(earlier["job_id"])["tomb"]):
            raise IdempotencyInProgress(earlier["job_id"])
        return str(earlier["job_id"])

    def release_idempotency_key(self, key: str, job_id: str, *, owner: str = ANONYMOUS) -> None:
        """Forget ``key`` if it is still bound to ``job_id``: its job was refused (a limit), so a retry of the
        same request must be able to create it later instead of waiting for a record that will never exist."""
        self._release_idempotency(keys=[_idempotency_key(key, owner)], args=[job_id])

    def get(self, job_id: str, *, owner: str | None = None) -> Job | None:
        """The public record; an expired job (tombstone only) comes back with status ``expired``.

        With ``owner``, another owner's job is None, exactly as a job that does not exist; None sees every job
        (workers, admin keys)."""
        k = _keys(job_id)
        raw = _str_dict(self.r.hgetall(k["record"]))
        if raw:
            return self._job(raw) if _visible(raw, owner) else None
        tomb = self.r.get(k["tomb"])
        if tomb is None:
            return None
        expired = json.loads(tomb)
        return _expired_job(job_id, expired) if _visible(expired, owner) else None

    def list_jobs(
        self,
        *,
        owner: str | None = None,
        status: str | None = None,
        kind: str | None = None,
        limit: int = 50,
        parent: str | None = None,
    ) -> list[JobSummary]:
        """Most recent first: ``owner``'s jobs from its own index, or (None) every job, as summaries (the fields
        of ``SUMMARY_FIELDS`` are read, never the spec, result or artifacts). Reads the index in pages until
        ``limit`` matching jobs are found. The runs of a benchmark that fanned out are in no index: with
        ``parent``, its runs (in run order) are listed instead, none when ``owner`` cannot see it."""
        if parent is not None:
            return self._list_children(parent, owner=owner, status=status, kind=kind, limit=limit)
        index = INDEX_KEY if owner is None else owner_index_key(owner)
        self.r.zremrangebyscore(index, "-inf", self._listing_horizon_ms())
        found: list[JobSummary] = []
        page, start = max(limit, 50), 0
        while len(found) < limit:
            ids = _strs(self.r.zrevrange(index, start, start + page - 1))
            if not ids:
                break
            start += page
            for job_id, raw in zip(ids, self._summary_fields(ids), strict=True):
                job: JobSummary | None = None
                if raw:
                    job = self._summary(raw) if _visible(raw, owner) else None
                elif status == "expired":
                    expired = self.get(job_id, owner=owner)
                    job = None if expired is None else summary_of(expired)
                if job is None or (status and job.status != status) or (kind and job.kind != kind):
                    continue
                found.append(job)
                if len(found) == limit:
                    break
        return found

    def _list_children(
        self, parent: str, *, owner: str | None, status: str | None, kind: str | None, limit: int
    ) -> list[JobSummary]:
        benchmark = self._summary_fields([parent])[0]
        if not benchmark or not _visible(benchmark, owner):
            return []
        ids = [child["id"] for child in _json_or(benchmark.get("children"), [])]
        found = []
        for raw in self._summary_fields(ids):
            if not raw:
                continue
            job = record_to_summary(raw)
            if (status and job.status != status) or (kind and job.kind != kind):
                continue
            found.append(job)
            if len(found) == limit:
                break
        return found

    def _summary_fields(self, ids: list[str]) -> list[dict[str, str]]:
        """The ``SUMMARY_FIELDS`` of each job's record (empty: no record), in one round trip."""
        pipe = self.r.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(record_key(job_id), SUMMARY_FIELDS)
        return [
            {field: str(value) for field, value in zip(SUMMARY_FIELDS, values, strict=True) if value is not None}
            for values in pipe.execute()
        ]

    def _summary(self, raw: Mapping[str, str]) -> JobSummary:
        """A job's summary; a benchmark that fanned out has its progress summed over its runs, as in its record."""
        job = record_to_summary(raw)
        entries = _json_or(raw.get("children"), None)
        if not entries:
            return job
        return job.model_copy(update={"progress": family_progress(job, self._children(entries))})

    def _job(self, raw: Mapping[str, str]) -> Job:
        """The public record; a benchmark that fanned out shows its runs and, summed over them, its progress."""
        job = record_to_job(raw)
        entries = _json_or(raw.get("children"), None)
        if not entries:
            return job
        children = self._children(entries)
        return job.model_copy(update={"children": children, "progress": family_progress(job, children)})

    def _children(self, entries: list[dict[str, Any]]) -> list[JobChild]:
        """A fanned-out benchmark's runs as they are now: each run's own record, else as the benchmark kept it."""
        pipe = self.r.pipeline(transaction=False)
        for entry in entries:
            pipe.hmget(record_key(entry["id"]), "status", "progress")
        children = []
        for entry, (status, progress) in zip(entries, pipe.execute(), strict=True):
            child = JobChild(
                id=entry["id"],
                task=entry.get("task"),
                method=entry["method"],
                seed=entry["seed"],
                status=entry.get("status", "expired"),  # the record is gone; a finished parent kept its state
                step=entry.get("step", 0),
                total=entry["total"],
            )
            if status is not None:
                step = JobProgress.model_validate_json(progress).step if progress else 0
                child = child.model_copy(update={"status": status, "step": min(step, child.total)})
            children.append(child)
        return children

    def _listing_horizon_ms(self) -> int:
        """Index entries older than this have neither record nor tombstone left: listing trims them."""
        return int((time.time() - self.ttl_s - self.tombstone_ttl_s) * 1000)

    def cancel(self, job_id: str) -> Literal["missing", "terminal", "cancelled", "requested"]:
        k = _keys(job_id)
        return self._cancel(  # type: ignore[no-any-return]
            keys=[k["record"], k["cancel"], ACTIVE_KEY, k["events"], QUEUED_KEY, k["lease"], PARKED_KEY],
            args=[now_iso(), self.ttl_s, job_id],
        )

    def events(self, job_id: str) -> list[str]:
        return _strs(self.r.lrange(_keys(job_id)["events"], 0, -1))

    def note(self, job_id: str, message: str) -> None:
        """A line of the job's own in its events (and in its benchmark's, for a run of one), stamped now."""
        stamped = f"{message}|{now_iso()}"
        found = self.run_of(job_id)
        pipe = self.r.pipeline()
        pipe.rpush(_keys(job_id)["events"], stamped)
        if found is not None:
            pipe.rpush(_keys(found[0])["events"], f"run {job_id}: {stamped}")
        pipe.execute()

    # ---- worker side

    def claim(self, job_id: str, *, worker: str, lease_ttl_s: float, max_attempts: int) -> Claim:
        """Take the job for one attempt: a new fencing token, attempts+1, status running, the lease set."""
        k = _keys(job_id)
        reply = self._claim(
            keys=[
                k["record"],
                k["lease"],
                k["fence"],
                ACTIVE_KEY,
                k["events"],
                k["cancel"],
                k["tomb"],
                TAKEN_KEY,
                QUEUED_KEY,
                PARKED_KEY,
            ],
            args=[
                now_iso(),
                worker,
                int(lease_ttl_s * 1000),
                max_attempts,
                job_id,
                self.ttl_s,
                self.tombstone_ttl_s,
            ],
        )
        outcome = reply[0]
        if outcome == "claimed":
            return Claim("claimed", fence=int(reply[1]), attempt=int(reply[2]))
        if outcome == "terminal":
            return Claim("terminal", status=reply[1])
        if outcome == "exhausted":
            return Claim("exhausted", attempt=int(reply[1]))
        return Claim(outcome)

    def renew_lease(self, job_id: str, fence: int, lease_ttl_s: float) -> bool:
        """False when the lease now belongs to a newer attempt (or expired): this attempt must stop."""
        return bool(self._renew(keys=[_keys(job_id)["lease"]], args=[fence, int(lease_ttl_s * 1000)]))

    def cancel_requested(self, job_id: str) -> bool:
        return bool(self.r.exists(_keys(job_id)["cancel"]))

    def write_progress(self, job_id: str, fence: int, progress: JobProgress) -> bool:
        return bool(
            self._update_if_owner(
                keys=[record_key(job_id)],
                args=[fence, "progress", progress.model_dump_json(), "updated_at", now_iso()],
            )
        )

    def finish(
        self,
        job_id: str,
        fence: int,
        status: Literal["succeeded", "failed", "cancelled"],
        *,
        result: Mapping[str, Any] | None = None,
        error: str | None = None,
        progress: JobProgress | None = None,
        artifacts: Iterable[Mapping[str, Any]] = (),
        children: Iterable[JobChild] | None = None,
    ) -> bool:
        """The one terminal write of a job; refused (False) unless this attempt still owns it. A benchmark that
        fanned out keeps its ``children`` as they ended (what GET shows once their own records have expired)."""
        fields: list[str] = ["artifacts", json.dumps(list(artifacts))]
        if children is not None:
            fields += ["children", json.dumps([_child_entry(child) for child in children])]
        if result is not None:
            fields += ["result", json.dumps(dict(result))]
        if error is not None:
            fields += ["error", error]
        if progress is not None:
            fields += ["progress", progress.model_dump_json()]
        k = _keys(job_id)
        return bool(
            self._finish(
                keys=[k["record"], k["lease"], ACTIVE_KEY, k["events"], k["tomb"], k["cancel"]],
                args=[fence, status, now_iso(), self.ttl_s, self.tombstone_ttl_s, job_id, *fields],
            )
        )

    def requeue_if_orphaned(self, job_id: str) -> str:
        """``requeued`` when the job was running and its lease expired; the caller then publishes it again."""
        k = _keys(job_id)
        return str(
            self._requeue(
                keys=[k["record"], k["lease"], ACTIVE_KEY, k["events"], k["cancel"], UNPUBLISHED_KEY, QUEUED_KEY],
                args=[now_iso(), job_id, int(time.time() * 1000)],
            )
        )

    def mark_taken(self, job_id: str, instance: str, alive_ttl_s: float) -> bool:
        """The consumer of worker ``instance`` took this job's message (it is now in kombu's unacked hash, where
        only the visibility timeout would bring it back). False for a job without a record (nothing to mark)."""
        k = _keys(job_id)
        return bool(
            self._mark_taken(
                keys=[TAKEN_KEY, worker_alive_key(instance), k["record"], k["events"]],
                args=[job_id, instance, int(alive_ttl_s * 1000), now_iso()],
            )
        )

    def release_taken(self, instance: str) -> int:
        """Forget every mark of worker ``instance`` (a clean stop); returns how many there were."""
        return int(self._release_taken(keys=[TAKEN_KEY], args=[instance]))

    def taken_by(self, job_id: str) -> str | None:
        """The worker instance holding this job's message before its claim, if any."""
        instance = self.r.hget(TAKEN_KEY, job_id)
        return None if instance is None else str(instance)

    def taken_jobs(self) -> dict[str, str]:
        """Every job taken and not claimed yet: job id -> worker instance. Small: one per busy consumer."""
        return _str_dict(self.r.hgetall(TAKEN_KEY))

    def requeue_if_unclaimed(self, job_id: str, instance: str) -> str:
        """``requeued`` when ``instance`` took the job's message and died before claiming it; the caller then
        publishes the job again (it is in ``jobs:unpublished`` until :meth:`mark_published`)."""
        k = _keys(job_id)
        return str(
            self._requeue_unclaimed(
                keys=[TAKEN_KEY, worker_alive_key(instance), k["record"], k["events"], UNPUBLISHED_KEY, QUEUED_KEY],
                args=[job_id, instance, now_iso(), int(time.time() * 1000)],
            )
        )

    def unacked_job_ids(self, task_name: str) -> dict[str, str]:
        """kombu's unacked messages of task ``task_name``: delivery tag -> job id (the task id is the job id)."""
        found = {}
        for tag, raw in _str_dict(self.r.hgetall(KOMBU_UNACKED_KEY)).items():
            job_id = _task_id_of_unacked(raw, task_name)
            if job_id is not None:
                found[tag] = job_id
        return found

    def settle_unacked(self, delivery_tag: str, job_id: str, grace_s: float) -> str:
        """Decide one unacked entry (see ``_SETTLE_UNACKED``): ``dropped`` (its job is terminal), ``requeued``
        (the caller publishes the job again), ``kept`` or ``gone``."""
        k = _keys(job_id)
        return str(
            self._settle_unacked(
                keys=[
                    KOMBU_UNACKED_KEY,
                    KOMBU_UNACKED_INDEX_KEY,
                    k["record"],
                    k["lease"],
                    TAKEN_KEY,
                    k["events"],
                    UNPUBLISHED_KEY,
                    QUEUED_KEY,
                ],
                args=[delivery_tag, job_id, int(time.time() * 1000), int(grace_s * 1000), now_iso()],
            )
        )

    def queued_before(self, older_than_s: float) -> list[str]:
        """Queued jobs last (re)published more than ``older_than_s`` ago: where a lost message would show."""
        cutoff = (time.time() - older_than_s) * 1000
        return _strs(self.r.zrangebyscore(QUEUED_KEY, "-inf", cutoff))

    def queued_message_ids(self, queue: str, task_name: str) -> set[str]:
        """Job ids of the messages of ``task_name`` waiting in broker queue ``queue`` (every priority list kombu
        keeps for it)."""
        found = set()
        for priority in KOMBU_PRIORITY_STEPS:
            key = queue if priority == 0 else f"{queue}{KOMBU_PRIORITY_SEP}{priority}"
            for raw in _strs(self.r.lrange(key, 0, -1)):
                job_id = _task_id_of_message(raw, task_name)
                if job_id is not None:
                    found.add(job_id)
        return found

    def requeue_if_lost(self, job_id: str, grace_s: float) -> str:
        """Decide a queued job whose message the caller found nowhere (see ``_REQUEUE_IF_LOST``): ``requeued``
        (the caller publishes it again), ``recent``, ``held``, ``unpublished`` or ``gone``."""
        k = _keys(job_id)
        return str(
            self._requeue_lost(
                keys=[QUEUED_KEY, k["record"], k["lease"], TAKEN_KEY, UNPUBLISHED_KEY, k["events"]],
                args=[job_id, int(time.time() * 1000), int(grace_s * 1000), now_iso()],
            )
        )

    def active_job_ids(self) -> list[str]:
        return sorted(_strs(self.r.smembers(ACTIVE_KEY)))

    def queue_of(self, job_id: str) -> str | None:
        queue = self.r.hget(record_key(job_id), "queue")
        return None if queue is None else str(queue)

    def publish_target(self, job_id: str) -> tuple[str, int | None]:
        """The queue and the message priority a job is (re)published with (None: the broker's default)."""
        queue, priority = self.r.hmget(record_key(job_id), "queue", "priority")
        return (str(queue) if queue else "cpu"), (int(priority) if priority else None)

    # ---- benchmarks that fan out (see the module docstring)

    def park(
        self,
        job_id: str,
        fence: int,
        *,
        children: Iterable[tuple[str, Mapping[str, Any]]] = (),
        child_priority: int | None = None,
    ) -> tuple[Literal["parked", "ready", "cancelled", "stale"], int]:
        """For the attempt holding benchmark ``job_id`` (its ``fence``): ``ready`` when every run has ended (the
        attempt keeps its claim and puts them together); else ``parked``, creating first, if it has none, one
        child per ``(child id, run)`` (``run``: its ``method`` label, ``index``, ``seed`` and progress ``total``),
        and how many were created (the caller publishes them); ``cancelled`` when it was cancelled before it had
        children (nothing created: the caller ends it cancelled); ``stale`` when a newer attempt owns it."""
        k = _keys(job_id)
        runs = [(child_id, dict(run)) for child_id, run in children]
        entries = [{"id": child_id, **run} for child_id, run in runs]
        reply = self._park(
            keys=[
                k["record"],
                k["lease"],
                ACTIVE_KEY,
                k["events"],
                k["cancel"],
                PARKED_KEY,
                UNPUBLISHED_KEY,
                QUEUED_KEY,
            ],
            args=[
                fence,
                job_id,
                now_iso(),
                int(time.time() * 1000),
                self.ttl_s,
                self.tombstone_ttl_s,
                _priority_arg(child_priority),
                json.dumps(entries),
                *[part for child_id, run in runs for part in (child_id, json.dumps(run))],
            ],
        )
        return reply[0], int(reply[1]) if len(reply) > 1 else 0

    def wake_parent(self, job_id: str, grace_s: float, priority: int | None = None) -> str:
        """``woken`` when ``job_id`` is parked, none of its runs is open and it was not woken within ``grace_s``:
        the caller publishes it (with ``priority``). Else ``open``, ``recent``, ``held`` or ``gone``."""
        k = _keys(job_id)
        return str(
            self._wake_parent(
                keys=[PARKED_KEY, k["record"], k["lease"], k["events"]],
                args=[job_id, int(time.time() * 1000), int(grace_s * 1000), now_iso(), _priority_arg(priority)],
            )
        )

    def child_ended(self, child_id: str, parent_id: str, grace_s: float, priority: int | None = None) -> str:
        """Child ``child_id`` of ``parent_id`` ended (or will not run on this delivery): if it failed or was
        cancelled its open siblings are cancelled; then as :meth:`wake_parent`."""
        k = _keys(parent_id)
        return str(
            self._child_ended(
                keys=[PARKED_KEY, k["record"], k["lease"], k["events"], record_key(child_id)],
                args=[
                    parent_id,
                    int(time.time() * 1000),
                    int(grace_s * 1000),
                    now_iso(),
                    _priority_arg(priority),
                    self.ttl_s,
                    child_id,
                ],
            )
        )

    def parked_jobs(self) -> dict[str, float]:
        """Every parked benchmark: id -> when it was last woken (ms since the epoch; 0: not since it parked)."""
        entries: Any = self.r.zrange(PARKED_KEY, 0, -1, withscores=True)  # [(member, score), ...]
        return {str(job_id): float(score) for job_id, score in entries}

    def run_of(self, job_id: str) -> tuple[str, dict[str, Any]] | None:
        """A child's parent id and its run (``method`` label, ``index``, ``seed``, ``total``); None for any other."""
        parent, run = self.r.hmget(record_key(job_id), "parent", "run")
        return None if not parent or not run else (str(parent), json.loads(run))

    # ---- throughput (job duration estimates)

    def throughput(self, queue: str) -> float | None:
        """Multiply-adds per second that jobs on ``queue`` have run at lately; None before any was measured."""
        value = self.r.hget(THROUGHPUT_KEY, queue)
        return None if value is None else float(value)

    def record_throughput(self, queue: str, macs_per_s: float, *, weight: float = 0.3) -> None:
        """Fold one finished attempt's rate into ``queue``'s moving average (the newest counts ``weight``). Two
        workers finishing at once may each fold into the same old value: an estimate, not an account."""
        if not macs_per_s > 0:
            return
        old = self.throughput(queue)
        new = macs_per_s if old is None else (1 - weight) * old + weight * macs_per_s
        self.r.hset(THROUGHPUT_KEY, queue, repr(new))

    # ---- worker liveness (readiness)

    def beat_worker(self, hostname: str, queues: list[str], ttl_s: float, *, instance: str | None = None) -> None:
        """Readiness (by hostname) and, with ``instance``, the liveness that taken-but-unclaimed jobs hang on."""
        info = json.dumps({"hostname": hostname, "queues": queues, "pid": os.getpid(), "at": now_iso()})
        pipe = self.r.pipeline(transaction=False)
        pipe.zadd(WORKERS_KEY, {hostname: time.time() + ttl_s})
        pipe.hset(WORKERS_INFO_KEY, hostname, info)
        if instance is not None:
            pipe.set(worker_alive_key(instance), "1", px=int(ttl_s * 1000))
        pipe.execute()

    def forget_worker(self, hostname: str) -> None:
        pipe = self.r.pipeline(transaction=False)
        pipe.zrem(WORKERS_KEY, hostname)
        pipe.hdel(WORKERS_INFO_KEY, hostname)
        pipe.execute()

    def live_workers(self) -> list[dict[str, Any]]:
        now = time.time()
        dead = _strs(self.r.zrangebyscore(WORKERS_KEY, "-inf", now))
        if dead:
            self.r.zrem(WORKERS_KEY, *dead)
            self.r.hdel(WORKERS_INFO_KEY, *dead)
        alive = _strs(self.r.zrangebyscore(WORKERS_KEY, now, "+inf"))
        if not alive:
            return []
        infos = self.r.hmget(WORKERS_INFO_KEY, alive)
        return [json.loads(info) for info in infos if info]


# ---------------------------------------------------------------------------------------------- records


def _strs(values: Iterable[Any]) -> list[str]:
    """redis-py's return types do not know about ``decode_responses=True``; the values are str."""
    return [str(v) for v in values]


def _str_dict(values: Mapping[Any, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in values.items()}


def _task_id_of_unacked(raw: str, task_name: str) -> str | None:
    """The Celery task id of one kombu unacked entry (JSON [message, exchange, routing key]), or None for any
    other message."""
    try:
        message = json.loads(raw)[0]
    except (ValueError, LookupError, TypeError):
        return None
    return _task_id_in(message, task_name)


def _task_id_of_message(raw: str, task_name: str) -> str | None:
    """The Celery task id of one message waiting in a kombu queue list (JSON), or None for any other message."""
    try:
        message = json.loads(raw)
    except ValueError:
        return None
    return _task_id_in(message, task_name)


def _task_id_in(message: Any, task_name: str) -> str | None:
    """Protocol 2 keeps the task name and id in the message headers."""
    try:
        headers = message.get("headers") or {}
        if headers.get("task") != task_name:
            return None
        task_id = headers.get("id")
    except (ValueError, LookupError, TypeError, AttributeError):
        return None
    return task_id if isinstance(task_id, str) else None


def _visible(record: Mapping[str, Any], owner: str | None) -> bool:
    """Whether a record (or tombstone) is shown to ``owner``; None sees all. Older records have no owner."""
    return owner is None or record.get("owner", ANONYMOUS) == owner


def _idempotency_key(key: str, owner: str) -> str:
    """One namespace per owner; the anonymous owner keeps the key format used before owners existed."""
    digest = hashlib.sha256(key.encode()).hexdigest()
    return f"{PREFIX}idem:{digest}" if owner == ANONYMOUS else f"{PREFIX}idem:{owner}:{digest}"


def _json_or(raw: str | None, default: Any) -> Any:
    return default if not raw else json.loads(raw)


def _priority_arg(priority: int | None) -> str:
    """A message priority as a script argument; empty: the broker's default (no field kept)."""
    return "" if priority is None else str(priority)


def _child_entry(child: JobChild) -> dict[str, Any]:
    return {"id": child.id, "task": child.task, "method": child.method, "seed": child.seed, "total": child.total,
            "status": child.status, "step": child.step}  # fmt: skip


def _run_name(child: JobChild) -> str:
    return (f"{child.task}: " if child.task else "") + f"{child.method} seed {child.seed}"


def family_progress(job: Job | JobSummary, children: list[JobChild]) -> JobProgress:
    """A benchmark's progress from its runs: their steps summed (a run that succeeded counts whole), an ETA from
    the pace since the benchmark started, and a stage naming the runs in progress."""
    total = sum(child.total for child in children)
    step = sum(child.total if child.status == "succeeded" else child.step for child in children)
    done = sum(child.status in TERMINAL_STATUSES for child in children)
    running = [_run_name(child) for child in children if child.status == "running"]
    stage = f"{done} of {len(children)} runs ended" + (f"; running {', '.join(running)}" if running else "")
    eta: float | None = None
    if job.status == "succeeded":
        eta = 0.0
    elif not is_terminal(job.status) and job.started_at is not None and 0 < step < total:
        elapsed = (datetime.now(UTC) - job.started_at).total_seconds()
        eta = round((total - step) * elapsed / step, 1)
    return JobProgress(step=step, total=total, eta_s=eta, stage=stage)


def artifact_url(job_id: str, name: str) -> str:
    return f"/v1/jobs/{job_id}/artifacts/{name}"


def record_to_job(raw: Mapping[str, str]) -> Job:
    job_id = raw["id"]
    return Job(
        id=job_id,
        kind=raw["kind"],
        status=raw["status"],
        progress=JobProgress.model_validate_json(raw["progress"]) if raw.get("progress") else JobProgress(),
        result=_json_or(raw.get("result"), None),
        error=raw.get("error") or None,
        artifacts=[
            Artifact(name=a["name"], url=artifact_url(job_id, a["name"]), size=a.get("size"))
            for a in _json_or(raw.get("artifacts"), [])
        ],
        spec=_json_or(raw.get("spec"), {}),
        attempts=int(raw.get("attempts") or 0),
        queue=raw.get("queue") or "cpu",
        created_at=raw["created_at"],
        started_at=raw.get("started_at") or None,
        finished_at=raw.get("finished_at") or None,
        updated_at=raw.get("updated_at") or None,
        parent=raw.get("parent") or None,
        estimate_s=_json_or(raw.get("estimate_s"), None),
    )


# The record fields a listing reads: never the spec, result or artifacts, whose size the caller chooses.
SUMMARY_FIELDS = (
    "id", "kind", "status", "progress", "error", "attempts", "queue", "created_at", "started_at", "finished_at",
    "updated_at", "estimate_s", "parent", "run", "children", "owner", "methods",
)  # fmt: skip


def method_names(spec: Mapping[str, Any]) -> list[str]:
    """What a listing calls a spec's method entries: each one's label, else its method, else its config preset's
    name, else ``config`` (a config written out). Empty for a compute job's spec, which has no entries."""
    names = []
    for entry in spec.get("methods") or []:
        if isinstance(entry, Mapping):
            config = entry.get("config")
            names.append(
                str(entry.get("label") or entry.get("method") or (config if isinstance(config, str) else "config"))
            )
    return names


def record_to_summary(raw: Mapping[str, str]) -> JobSummary:
    """A job's summary from its ``SUMMARY_FIELDS``; a run of a benchmark is named after its own method entry."""
    run = _json_or(raw.get("run"), None)
    methods = [run["method"]] if run else _json_or(raw.get("methods"), None)
    error = raw.get("error") or None
    return JobSummary(
        id=raw["id"],
        kind=raw["kind"],
        status=raw["status"],
        progress=JobProgress.model_validate_json(raw["progress"]) if raw.get("progress") else JobProgress(),
        error=None if error is None else error[:SUMMARY_ERROR_CHARS],
        methods=methods,
        attempts=int(raw.get("attempts") or 0),
        queue=raw.get("queue") or "cpu",
        created_at=raw["created_at"],
        started_at=raw.get("started_at") or None,
        finished_at=raw.get("finished_at") or None,
        updated_at=raw.get("updated_at") or None,
        estimate_s=_json_or(raw.get("estimate_s"), None),
        parent=raw.get("parent") or None,
        runs=len(_json_or(raw.get("children"), [])),
    )


def summary_of(job: Job) -> JobSummary:
    """The summary of a whole record (an expired job's, made from its tombstone)."""
    fields = {name: getattr(job, name) for name in JobSummary.model_fields if name not in ("methods", "runs")}
    error = fields["error"]
    fields["error"] = None if error is None else error[:SUMMARY_ERROR_CHARS]
    return JobSummary(**fields, methods=None, runs=len(job.children))


def _expired_job(job_id: str, tomb: Mapping[str, Any]) -> Job:
    return Job(
        id=job_id,
        kind=tomb["kind"],
        status="expired",
        spec={},
        queue=tomb.get("queue", "cpu"),
        created_at=tomb["created_at"],
        error="the job's record and result expired (job_ttl_s); its artifacts may be gone too",
    )


def is_terminal(status: str) -> bool:
    return status in TERMINAL_STATUSES


def list_artifacts(job_dir: Path) -> list[dict[str, Any]]:
    """Files a job produced, relative POSIX names, excluding its resume checkpoints and temp files."""
    if not job_dir.is_dir():
        return []
    found = []
    for path in sorted(job_dir.rglob("*")):
        rel = path.relative_to(job_dir)
        if not path.is_file() or rel.parts[0] == CHECKPOINT_DIR_NAME or path.name.startswith("."):
            continue
        found.append({"name": rel.as_posix(), "size": path.stat().st_size})
    return found


def store_from_settings(settings: Settings) -> JobStore:
    if not settings.redis_url:
        raise RuntimeError("POSENC_REDIS_URL is not set (`posenc serve` sets it for its children)")
    return JobStore(
        connect(settings.redis_url),
        ttl_s=settings.job_ttl_s,
        tombstone_ttl_s=settings.job_tombstone_ttl_s,
        idempotency_ttl_s=settings.idempotency_ttl_s,
    )
