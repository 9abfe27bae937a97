// The agent connection and a job's life, written down in one place.
//
// CONNECTION
//   1. The agent opens a WebSocket to `<coordinator>/agent/ws` with `Authorization: Bearer <token>`.
//      An unknown or revoked token: the upgrade is refused (HTTP 401), or a live connection is
//      closed with UNAUTHORIZED when its token is revoked. Do not retry with that token.
//   2. The agent sends `hello` {protocolVersion, agentVersion, hostname, labels, runningJobs}.
//      The coordinator answers `welcome` {agentId, agentName, heartbeatMs, leaseMs, abandonAfterMs}
//      — or `reject` {reason}
//      followed by a close with VERSION_MISMATCH when PROTOCOL_VERSION differs (the reason says
//      which side to upgrade). Nothing but `hello` is accepted before `welcome`.
//   3. Liveness: the coordinator pings every heartbeatMs; each side treats 2 × heartbeatMs of
//      silence as a dead connection and closes it. The agent reconnects with capped, jittered
//      exponential backoff (except after UNAUTHORIZED / VERSION_MISMATCH, which are fatal).
//   4. A second connection of the same agent replaces the first (closed with REPLACED).
//   5. Any frame that is not valid JSON, not a known message of that direction, breaks its schema
//      or the order below is answered by closing that connection with BAD_FRAME (TOO_LARGE past
//      MAX_FRAME_BYTES); nothing else is affected.
//
// A JOB (one deployment on one host)
//   coordinator                              agent
//   job.assign {jobId, repository, ...} ──►
//                                        ◄── job.accepted {jobId}
//   for each step of the plan (protocol/step-plan.ts: 0 = checkout, 1..n = commands):
//                                        ◄── step.started {jobId, step, cmd}
//                                        ◄── step.output {jobId, step, seq, offset, data}  (repeated;
//                                            a binary frame: codec.ts)
//   output.ack {jobId, step, offset} ──►      (everything before offset is stored)
//                                        ◄── step.finished {jobId, step, exitCode, signal, outputBytes}
//   after the last step, or the first failing one:
//                                        ◄── job.finished {jobId, status, reason?}
//   job.ack {jobId} ──►                       (the end is stored: the agent may forget the job)
//   job.cancel {jobId, reason, as} ──►        (at any time; the agent stops the running step —
//                                              TERM to its process group, KILL after a grace —
//                                              and finishes the job with status `as`:
//                                              `cancelled` or `timed_out`)
//
// Rules:
//   - Steps run in order; a step's output offsets start at 0 and are contiguous. The coordinator
//     stores each byte once (a repeated offset is a duplicate and is dropped) and acknowledges the
//     contiguous prefix it has; a step's entry is complete when it has `outputBytes` bytes.
//   - The agent keeps unacknowledged output (in memory, then in a spool file past a bound) and
//     re-sends it after a reconnect, from the acknowledged offset; it also re-sends the
//     `step.finished` / `job.finished` of jobs whose `job.ack` it has not had. `hello.runningJobs`
//     lists every job the agent still holds (running, or ended but not acknowledged); a job the
//     coordinator believes running that is not listed was lost with the agent.
//   - Leases: a running job is the coordinator's as long as its agent is heard from; silent past
//     `leaseMs`, the job ends `failed` (reason `agent lost`). The agent, cut off past
//     `abandonAfterMs` (lease + grace), kills the job's process group and reports it `abandoned`
//     when it reconnects. A job keeps running while its agent is merely reconnecting.
//   - `commandTimeoutMs`: a command running longer is stopped like a cancel; the job ends
//     `timed_out`. The deployment's own deadline is the coordinator's: it sends `job.cancel` with
//     `as: 'timed_out'`.
//   - Output is masked on the agent before it is sent: every value in `masks` becomes `[MASKED]`.
//   - Messages about a job the agent was not given, or about a finished job, are refused — except
//     `step.output` re-sent after a reconnect for a step that already ended: it is acknowledged
//     and dropped (the entry is complete), so the agent can forget it.
//   - Job states on the coordinator: pending → sent → running → success | failed | cancelled |
//     timed_out | abandoned. The deployment succeeds only when every host's job succeeded.

export const JOB_STATES = [
  'pending',
  'sent',
  'running',
  'success',
  'failed',
  'cancelled',
  'timed_out',
  'abandoned',
] as const;
export type JobState = (typeof JOB_STATES)[number];

export const FINAL_JOB_STATES: ReadonlySet<JobState> = new Set([
  'success',
  'failed',
  'cancelled',
  'timed_out',
  'abandoned',
]);

/** The transitions a job may make; anything else is out of order and refused. */
export const JOB_TRANSITIONS: Readonly<Record<JobState, readonly JobState[]>> = {
  pending: ['sent', 'cancelled'],
  sent: ['running', 'pending', 'cancelled', 'failed'],
  running: ['success', 'failed', 'cancelled', 'timed_out', 'abandoned'],
  success: [],
  failed: [],
  cancelled: [],
  timed_out: [],
  abandoned: [],
};
