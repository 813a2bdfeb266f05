"""The vLLM V1 scheduler of one replica, with decoding sequences kept as aggregates.

Each step, schedule() does what vLLM's Scheduler.schedule() does: one token budget
(max_num_batched_tokens) shared by every token of the step; RUNNING requests first, in admission
order (one token per decoding sequence, the next chunk for a sequence still prefilling), then
WAITING requests in FCFS order while the budget, max_num_seqs and free KV blocks allow; when a
running request cannot get a block, the last admitted running request is preempted (recompute)
and goes back to the front of the waiting queue; no admissions in a step that preempted.

To make a step O(1) whatever the batch size, decoding sequences are not visited one by one: the
scheduler keeps their count, the sum of their contexts, a histogram of their position within a
KV block (so the blocks crossed by k decode steps are known in aggregate), and a heap of the
step counts at which each one finishes. A decoder's token counts are derived from the replica
step counter and written back only when it leaves the decode set. The exact per-request walk of
vLLM's running loop is used only when the token budget or the KV cache is tight.

Multi-step scheduling (vLLM V0's --num-scheduler-steps N > 1): the Replica runs a batch of
decoders for N steps per scheduling pass and sets `admit` False inside a pass, so no request is
admitted (and no prefill scheduled) until the pass ends; a decoder that finishes inside a pass
is held (`held`) and delivered, with its last token, at the pass's end (release_held).
Without chunked prefill (V0's default), a step prefills whole prompts alone, the decoders
paused (their step clock stands still), or decodes (_schedule_prompts_only).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from heapq import heappop, heappush

from models.serving.config import ReplicaConfig
from models.serving.kv_cache import KVBlockPool
from models.serving.records import ReplicaCounters, RequestRecord
from models.serving.request import FinishReason, Request, RequestStatus

STEP_IDLE = 0
STEP_MIXED = 1  # a step with prefill, preemption or budget-starved decoders: price it alone
STEP_DECODE = 2  # pure decode, nothing admissible: may be fast-forwarded

_GEN_KEY = "\x00generated/{}/{}"  # segment keys of generated tokens; no prompt key starts so
_NO_CHUNKS: tuple[tuple[Request, int, int], ...] = ()  # a step without prefill chunks


class ReplicaScheduler:
    """Queues, KV cache and counters of one replica, and the vLLM V1 scheduling policy."""

    def __init__(self, index: int, config: ReplicaConfig, sink: list[RequestRecord]) -> None:
        sched = config.scheduler
        cache = config.cache
        self.index = index
        self.sink = sink
        self.max_num_seqs = sched.max_num_seqs
        self.max_num_batched_tokens = sched.max_num_batched_tokens
        self.long_prefill_token_threshold = sched.long_prefill_token_threshold
        self.max_model_len = sched.max_model_len
        self.reserve = sched.admission == "reserve"
        self.reserved_blocks = 0  # sum of the running requests' reservations (admission reserve)
        # multi-step scheduling: admissions only between passes; finishes held to the pass end
        self.admit = True
        self.hold_finishes = sched.num_scheduler_steps > 1
        self.held: dict[Request, FinishReason] = {}
        # V0 without chunked prefill: steps of whole prompts alone, decoders paused meanwhile
        self.chunked_prefill = sched.enable_chunked_prefill
        self.block_size = cache.block_size
        self.prefix_caching = cache.enable_prefix_caching
        self.kv = KVBlockPool(cache.num_gpu_blocks, cache.block_size, cache.enable_prefix_caching)
        self.waiting: deque[Request] = deque()
        self.running: dict[Request, None] = {}  # admission order, like vLLM's running list
        self.prefilling: dict[Request, None] = {}  # running requests not yet decoding
        # decode set, in aggregate
        self.step_count = 0  # engine steps completed; decoders advance one token per step
        self.n_dec = 0
        self.ctx_sum = 0  # sum of decoders' computed tokens
        self.phase = [0] * cache.block_size  # decoders by (computed - step_count) % block_size
        self.finish_heap: list[tuple[int, int, Request]] = []
        self.share_per_token = 0.0  # running sum of step_duration / step_tokens
        # the step being executed
        self.step_n = 0
        self.step_ctx = 0
        self.step_cross = 0  # decode blocks of this step already allocated at scheduling
        self.step_chunks: Sequence[tuple[Request, int, int]] = _NO_CHUNKS
        self.step_prefill_tokens = 0
        self.step_prefill_attention = 0.0
        self.resume_gaps: list[float] = []
        # counters (vLLM metric names)
        self.prompt_tokens = 0
        self.prompt_tokens_cached = 0
        self.generation_tokens = 0
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.preempted_prefix_cache_queries = 0
        self.preempted_prefix_cache_hits = 0
        self.num_preemptions = 0
        # vllm:request_success by finished_reason
        self.success_stop = 0
        self.success_length = 0
        self.success_abort = 0
        self.success_error = 0
        self.iteration_tokens = 0
        self.num_steps = 0
        self.prefill_computed_tokens = 0
        self.gpu_busy_s = 0.0

    # -- admission ------------------------------------------------------------------------

    def add_request(self, req: Request, now: float) -> bool:
        """Queue a request; reject it (finish_reason error) if it can never be served."""
        spec = req.spec
        longest = req.prompt_tokens + (spec.max_tokens or spec.output_tokens)
        kv_tokens = req.prompt_tokens + spec.output_tokens - 1  # the last token never enters KV
        if longest > self.max_model_len or kv_tokens > self.kv.num_blocks * self.block_size:
            self._finish(req, now, FinishReason.ERROR)
            return False
        self.waiting.append(req)
        return True

    @property
    def num_outstanding(self) -> int:
        return len(self.waiting) + len(self.running)

    # -- one step -------------------------------------------------------------------------

    def schedule(self, now: float) -> int:
        """Choose the next step's batch (allocating its KV blocks); return its kind."""
        if not self.chunked_prefill and self.waiting and self.admit:
            kind = self._schedule_prompts_only(now)
            if kind:
                return kind
        if not self.waiting and not self.prefilling:
            # The common case, decoders only: every one gets its token, if step 1 gets blocks.
            n = self.n_dec
            if not n:
                return STEP_IDLE
            if self.phase[-self.step_count % self.block_size] <= self.kv.free:
                self.step_n = n
                self.step_ctx = self.ctx_sum
                self.step_cross = 0  # a pure-decode step allocates its blocks on completion
                self.step_chunks = _NO_CHUNKS
                return STEP_DECODE
        kv = self.kv
        budget = self.max_num_batched_tokens
        n = self.n_dec
        bs = self.block_size
        chunks: list[tuple[Request, int, int]] = []
        preempted = False
        cross = self.phase[-self.step_count % bs] if n else 0
        fast = True
        prefilling = self.prefilling
        plans: list[tuple[Request, int]] = []
        if prefilling:
            threshold = self.long_prefill_token_threshold
            demand = n
            for r in prefilling:
                rem = r.num_tokens - r.num_computed_tokens
                if threshold and rem > threshold:
                    rem = threshold
                demand += rem
                plans.append((r, rem))
            if demand > budget:
                fast = False
            else:
                # Each newly held block costs the free pool at most one block.
                need = cross
                for r, rem in plans:
                    need += -(-(r.num_computed_tokens + rem) // bs) - r.kv_held
                if need > kv.free:
                    need = cross
                    for r, rem in plans:
                        need += kv.advance(r, r.num_computed_tokens + rem, False)
                    fast = need <= kv.free
        elif cross > kv.free:
            fast = False
        if fast:
            # Every running request gets its full share: order does not matter.
            if cross:
                kv.allocate(cross)
            for r, rem in plans:
                c0 = r.num_computed_tokens
                kv.advance(r, c0 + rem, True)
                r.num_computed_tokens = c0 + rem
                chunks.append((r, rem, c0))
                budget -= rem
            budget -= n
            self.step_n = n
            self.step_ctx = self.ctx_sum
        else:
            budget, preempted = self._schedule_running_exact(now, chunks)
            cross = self.step_cross
        self.step_cross = cross
        if not preempted and self.waiting and budget > 0 and self.admit and self.chunked_prefill:
            self._schedule_waiting(now, budget, chunks)
        self.step_chunks = chunks
        if not chunks and not preempted:
            if not self.step_n:
                # Nothing can run (a preempted request is alone and waits): should not happen,
                # every request fits the cache alone.
                raise RuntimeError(f"replica {self.index}: no schedulable work")
            self.step_prefill_tokens = 0
            self.step_prefill_attention = 0.0
            return STEP_DECODE
        tokens = self._price_prefill(chunks)
        if not tokens and not self.step_n:
            # Only preemptions happened (vLLM runs an empty step): schedule again at once.
            return self.schedule(now)
        return STEP_MIXED

    def _schedule_prompts_only(self, now: float) -> int:
        """V0 without chunked prefill (vllm/core/scheduler.py `_schedule_default`): a step of
        whole prompts, no decoder; STEP_MIXED, or STEP_IDLE when no prompt can be admitted."""
        chunks: list[tuple[Request, int, int]] = []
        self._schedule_waiting(now, self.max_num_batched_tokens, chunks)
        if not chunks:
            return STEP_IDLE
        self.step_n = self.step_ctx = self.step_cross = 0
        self.step_chunks = chunks
        self._price_prefill(chunks)
        return STEP_MIXED

    def _price_prefill(self, chunks: list[tuple[Request, int, int]]) -> int:
        """Set the step's prefill tokens and attention pairs from its chunks (request, tokens,
        context before them); returns the tokens."""
        tokens = 0
        attention = 0.0
        for _, t, c0 in chunks:
            tokens += t
            attention += t * (c0 + t / 2)
        self.step_prefill_tokens = tokens
        self.step_prefill_attention = attention
        return tokens

    def _schedule_running_exact(
        self, now: float, chunks: list[tuple[Request, int, int]]
    ) -> tuple[int, bool]:
        """vLLM's running loop, request by request (budget or KV cache is tight)."""
        kv = self.kv
        bs = self.block_size
        threshold = self.long_prefill_token_threshold
        step = self.step_count
        budget = self.max_num_batched_tokens
        order = list(self.running)
        if self.held:  # finished inside a multi-step pass: no longer computed
            order = [r for r in order if r not in self.held]
        end = len(order)
        idx = 0
        n = ctx = cross = 0
        preempted = False
        while idx < end and budget > 0:
            r = order[idx]
            if r.decoding:
                c = r.dec_computed0 + step - r.dec_step0
                need = 1 if c % bs == 0 else 0
            else:
                rem = r.num_tokens - r.num_computed_tokens
                if threshold and rem > threshold:
                    rem = threshold
                if rem > budget:
                    rem = budget
                need = kv.advance(r, r.num_computed_tokens + rem, False)
            self_preempted = False
            while need > kv.free:
                end -= 1
                victim = order[end]
                self._preempt(victim, now)
                preempted = True
                if victim is r:
                    self_preempted = True
                    break
                if not r.decoding:
                    need = kv.advance(r, r.num_computed_tokens + rem, False)
            if self_preempted:
                break
            if r.decoding:
                if need:
                    kv.allocate(1)
                    cross += 1
                n += 1
                ctx += c
                budget -= 1
            else:
                c0 = r.num_computed_tokens
                kv.advance(r, c0 + rem, True)
                r.num_computed_tokens = c0 + rem
                chunks.append((r, rem, c0))
                budget -= rem
            idx += 1
        for r in order[idx:end]:
            if r.decoding:
                # vLLM's loop would leave this decoder out of the step. It cannot happen with
                # synchronous scheduling: a request's demand never grows from one step to the
                # next except for the one the budget truncated, which is last in the step.
                raise RuntimeError(f"replica {self.index}: decoder {r} out of token budget")
        self.step_n = n
        self.step_ctx = ctx
        self.step_cross = cross
        return budget, preempted

    def _schedule_waiting(
        self, now: float, budget: int, chunks: list[tuple[Request, int, int]]
    ) -> None:
        waiting = self.waiting
        running = self.running
        kv = self.kv
        bs = self.block_size
        threshold = self.long_prefill_token_threshold
        while waiting and budget > 0:
            if len(running) >= self.max_num_seqs:
                break
            r = waiting[0]
            if self.reserve:
                need = self._whole_sequence_blocks(r)
                if self.reserved_blocks + need > kv.num_blocks:
                    break
                r.reserved_blocks = need
                self.reserved_blocks += need
            kv.attach(r)
            length = r.num_tokens
            if self.prefix_caching:
                # vLLM never serves the last prompt token from cache (it needs its logits).
                hit = kv.cached_blocks(r)
                cap = (length - 1) // bs
                hit_tokens = (hit if hit < cap else cap) * bs
            else:
                hit_tokens = 0
            num_new = length - hit_tokens
            if threshold and num_new > threshold and self.chunked_prefill:
                num_new = threshold
            if num_new > budget:
                if not self.chunked_prefill:  # V0: a prompt is never split over steps
                    kv.detach(r)
                    self._unreserve(r)
                    break
                num_new = budget
            x = hit_tokens + num_new
            # Each newly held block costs the free pool at most one block; only when that
            # bound does not fit is the exact cost worked out.
            if -(-x // bs) > kv.free and kv.advance(r, x, False) > kv.free:
                kv.detach(r)
                self._unreserve(r)
                break
            kv.advance(r, x, True)
            waiting.popleft()
            running[r] = None
            self.prefilling[r] = None
            r.num_computed_tokens = x
            if self.prefix_caching:
                if r.status is RequestStatus.PREEMPTED:
                    self.preempted_prefix_cache_queries += length
                    self.preempted_prefix_cache_hits += hit_tokens
                else:
                    self.prefix_cache_queries += length
                    self.prefix_cache_hits += hit_tokens
            if r.cached_tokens < 0:
                r.cached_tokens = hit_tokens
            if r.first_scheduled_s is None:
                r.first_scheduled_s = now
            r.status = RequestStatus.RUNNING  # from WAITING or PREEMPTED: always legal
            chunks.append((r, num_new, hit_tokens))
            budget -= num_new

    def _whole_sequence_blocks(self, r: Request) -> int:
        """Blocks a request's whole sequence can take: prompt + max_tokens (vLLM's default
        max_tokens reaches max_model_len), the last token never entering the cache."""
        spec = r.spec
        total = r.prompt_tokens + (spec.max_tokens or self.max_model_len - r.prompt_tokens)
        total = min(total, self.max_model_len)
        return -(-(total - 1) // self.block_size)

    def _unreserve(self, r: Request) -> None:
        self.reserved_blocks -= r.reserved_blocks
        r.reserved_blocks = 0

    # -- completing steps -----------------------------------------------------------------

    def complete_step(self, now: float, duration: float) -> None:
        """Apply the effects of the single step scheduled last, which ended at `now`."""
        n = self.step_n
        tokens = n + self.step_prefill_tokens
        per_token = duration / tokens
        if self.chunked_prefill or n == self.n_dec:
            self.step_count += 1  # every decoder advanced one token
            self.share_per_token += per_token
        self.ctx_sum += n
        self.generation_tokens += n
        self.iteration_tokens += tokens
        self.num_steps += 1
        self.gpu_busy_s += duration
        self.prefill_computed_tokens += self.step_prefill_tokens
        for r, t, _ in self.step_chunks:
            r.gpu_prefill_s += per_token * t
            r.computed_total += t
            if r.num_computed_tokens == r.num_tokens:
                # The prompt (or the recomputed sequence) is in: this step sampled a token.
                del self.prefilling[r]
                r.num_tokens += 1
                r.num_output_tokens += 1
                self.generation_tokens += 1
                if r.first_token_s is None:
                    r.first_token_s = now
                    self.prompt_tokens += r.prompt_tokens
                    self.prompt_tokens_cached += r.cached_tokens
                else:
                    self.resume_gaps.append(now - r.last_token_s)  # type: ignore[operator]
                r.last_token_s = now
                if r.num_output_tokens >= r.target_output_tokens:
                    self._finish(r, now, _reason(r))
                else:
                    self._join_decode(r)
        heap = self.finish_heap
        if heap and heap[0][0] <= self.step_count:
            self._finish_decoders(now)

    def complete_stretch(self, now: float, steps: int, duration: float) -> None:
        """Apply `steps` pure-decode steps (step_cross of their blocks were allocated when they
        were scheduled, the rest are allocated now)."""
        n = self.n_dec
        self.kv.allocate(self.crossings(steps) - self.step_cross)
        self.step_count += steps
        self.ctx_sum += n * steps
        self.share_per_token += duration / n
        self.generation_tokens += n * steps
        self.iteration_tokens += n * steps
        self.num_steps += steps
        self.gpu_busy_s += duration
        heap = self.finish_heap
        if heap and heap[0][0] <= self.step_count:
            self._finish_decoders(now)

    def crossings(self, steps: int) -> int:
        """KV blocks the decoders need over the next `steps` steps (one per block boundary)."""
        bs = self.block_size
        if steps < bs:
            full, part = 0, steps
        else:
            full, part = divmod(steps, bs)
        total = full * self.n_dec
        if part:
            # decoders crossing at steps step_count .. +part-1: phase[idx], phase[idx-1], ...
            # (indices modulo block_size: the window may wrap around the start of `phase`)
            idx = -self.step_count % bs
            lo = idx - part + 1
            phase = self.phase
            if lo >= 0:
                total += sum(phase[lo : idx + 1])
            else:
                total += sum(phase[: idx + 1]) + sum(phase[bs + lo :])
        return total

    def plan_stretch(self, max_steps: int | None) -> int:
        """How many pure-decode steps can run as one event: until the next decoder finishes,
        and no further than the free KV blocks last (the step after that preempts)."""
        heap = self.finish_heap
        while True:
            finish_step, _, r = heap[0]
            if r.decoding and r.dec_finish_step == finish_step:
                break
            heappop(heap)
        steps = finish_step - self.step_count
        if max_steps is not None and steps > max_steps:
            steps = max_steps
        n = self.n_dec
        bs = self.block_size
        avail = self.kv.free + self.step_cross
        if (steps // bs + 1) * n > avail and self.crossings(steps) > avail:
            full_cycles, rem = divmod(avail, n)
            phase = self.phase
            idx = -self.step_count % bs
            m = acc = 0
            while acc + phase[(idx - m) % bs] <= rem:
                acc += phase[(idx - m) % bs]
                m += 1
            steps = full_cycles * bs + m
        return steps

    # -- decode set -----------------------------------------------------------------------

    def _join_decode(self, r: Request) -> None:
        step = self.step_count
        c = r.num_computed_tokens
        r.decoding = True
        r.dec_step0 = step
        r.dec_computed0 = c
        key = (c - step) % self.block_size
        r.dec_phase = key
        self.phase[key] += 1
        self.n_dec += 1
        self.ctx_sum += c
        r.dec_share0 = self.share_per_token
        finish = step + r.target_output_tokens - r.num_output_tokens
        r.dec_finish_step = finish
        heappush(self.finish_heap, (finish, r.seq_no, r))

    def _leave_decode(self, r: Request) -> None:
        steps = self.step_count - r.dec_step0
        c = r.dec_computed0 + steps
        r.num_computed_tokens = c
        r.num_tokens = c + 1
        r.num_output_tokens += steps
        r.computed_total += steps
        r.gpu_decode_s += self.share_per_token - r.dec_share0
        self.phase[r.dec_phase] -= 1
        self.n_dec -= 1
        self.ctx_sum -= c
        r.decoding = False

    def _finish_decoders(self, now: float) -> None:
        heap = self.finish_heap
        step = self.step_count
        while heap and heap[0][0] <= step:
            finish_step, _, r = heappop(heap)
            if not r.decoding or r.dec_finish_step != finish_step:
                continue  # stale entry (preempted)
            self._leave_decode(r)
            r.last_token_s = now
            if self.hold_finishes:
                self.held[r] = _reason(r)  # still RUNNING: leaves at the end of the pass
            else:
                self._finish(r, now, _reason(r))

    def release_held(self, now: float) -> None:
        """End of a multi-step pass: the decoders that finished inside it leave now, their
        last tokens reaching the client with the pass's burst (vLLM V0's multi-step output
        processor appends a pass's tokens when its last step ends)."""
        if self.held:
            for r, reason in self.held.items():
                r.last_token_s = now
                self._finish(r, now, reason)
            self.held.clear()

    # -- leaving the running set ----------------------------------------------------------

    def _preempt(self, r: Request, now: float) -> None:
        """Preemption by recompute: free the request's blocks, requeue it at the front."""
        if r.decoding:
            self._leave_decode(r)
            r.last_token_s = now
        else:
            del self.prefilling[r]
        del self.running[r]
        on_path = r.prompt_tokens
        for _, t in r.gen_segments:
            on_path += t
        segment = None
        if self.prefix_caching and r.num_tokens > on_path:
            segment = (_GEN_KEY.format(r.seq_no, len(r.gen_segments)), r.num_tokens - on_path)
        self.kv.release(r, r.num_computed_tokens, segment)
        if segment is not None:
            r.gen_segments.append(segment)
        r.num_computed_tokens = 0
        self._unreserve(r)
        r.num_preemptions += 1
        self.num_preemptions += 1
        r.transition(RequestStatus.PREEMPTED)
        self.waiting.appendleft(r)

    def _finish(self, r: Request, now: float, reason: FinishReason) -> None:
        if r.status is RequestStatus.FINISHED:
            raise RuntimeError(f"{r} finished twice")
        if r.status is RequestStatus.RUNNING:
            self.kv.release(r, r.num_computed_tokens, None)
            del self.running[r]
            self._unreserve(r)
        r.status = RequestStatus.FINISHED  # legal from every other state
        if reason is FinishReason.LENGTH:
            self.success_length += 1
        elif reason is FinishReason.STOP:
            self.success_stop += 1
        elif reason is FinishReason.ABORT:
            self.success_abort += 1
        else:
            self.success_error += 1
        spec = r.spec
        self.sink.append(
            RequestRecord(
                spec.request_id,
                self.index,
                r.queued_s,
                r.queued_s,
                r.first_scheduled_s,
                r.first_token_s,
                r.last_token_s,
                now,
                r.prompt_tokens,
                max(r.cached_tokens, 0),
                r.num_output_tokens,
                reason,
                r.num_preemptions,
                r.gpu_prefill_s,
                r.gpu_decode_s,
                r.computed_total,
                spec.context,
            )
        )

    def abort_request(self, r: Request, now: float) -> None:
        """Finish one request with "abort" now (its client went away), as vLLM's
        Scheduler.finish_requests(..., FINISHED_ABORTED) does (vllm/v1/core/sched/scheduler.py):
        out of the waiting queue or the running set, its KV blocks freed the way any finished
        request's are (blocks on a prefix-cache path stay cached and become evictable). A
        running request must be aborted between steps (Replica defers it to the step end):
        the tokens it has produced by then are its output. A finished request is left alone."""
        status = r.status
        if status is RequestStatus.FINISHED or r in self.held:
            return  # a held request has its whole output: it leaves at the end of the pass
        if status is RequestStatus.RUNNING:
            if r.decoding:
                self._leave_decode(r)
                r.last_token_s = now  # every decoder took part in the step that ended now
            else:
                del self.prefilling[r]
        else:
            self.waiting.remove(r)  # WAITING or PREEMPTED: holds no KV blocks
        self._finish(r, now, FinishReason.ABORT)

    def abort_all(self, now: float) -> None:
        """Finish every request still here with "abort" (end of a horizon-limited run)."""
        self.release_held(now)
        for r in list(self.running):
            if r.decoding:
                self._leave_decode(r)
            else:
                del self.prefilling[r]
            self._finish(r, now, FinishReason.ABORT)
        while self.waiting:
            self._finish(self.waiting.popleft(), now, FinishReason.ABORT)

    # -- inspection -----------------------------------------------------------------------

    def counters(self) -> ReplicaCounters:
        return ReplicaCounters(
            prompt_tokens=self.prompt_tokens,
            prompt_tokens_cached=self.prompt_tokens_cached,
            generation_tokens=self.generation_tokens,
            prefix_cache_queries=self.prefix_cache_queries,
            prefix_cache_hits=self.prefix_cache_hits,
            preempted_prefix_cache_queries=self.preempted_prefix_cache_queries,
            preempted_prefix_cache_hits=self.preempted_prefix_cache_hits,
            num_preemptions=self.num_preemptions,
            request_success_stop=self.success_stop,
            request_success_length=self.success_length,
            request_success_abort=self.success_abort,
            request_success_error=self.success_error,
            iteration_tokens=self.iteration_tokens,
            num_steps=self.num_steps,
            prefill_computed_tokens=self.prefill_computed_tokens,
            decode_computed_tokens=self.iteration_tokens - self.prefill_computed_tokens,
            gpu_busy_s=self.gpu_busy_s,
        )

    def check(self) -> None:
        """Verify scheduler and KV-cache invariants (debug mode; O(running requests))."""
        bs = self.block_size
        step = self.step_count
        n = ctx = private = 0
        phase = [0] * bs
        for r in self.running:
            if r.status is not RequestStatus.RUNNING:
                raise AssertionError(f"{r} in running set")
            if r in self.held:
                private += -(-r.num_computed_tokens // bs) - r.kv_shared
            elif r.decoding:
                c = r.dec_computed0 + step - r.dec_step0
                n += 1
                ctx += c
                phase[(r.dec_computed0 - r.dec_step0) % bs] += 1
                if r.dec_phase != (r.dec_computed0 - r.dec_step0) % bs:
                    raise AssertionError(f"{r}: stale phase")
                private += -(-c // bs) - r.kv_shared
            else:
                if r not in self.prefilling:
                    raise AssertionError(f"{r} neither decoding nor prefilling")
                private += r.kv_held - r.kv_shared
        if len(self.prefilling) + n + len(self.held) != len(self.running):
            raise AssertionError("prefilling set out of step with running set")
        if (n, ctx, phase) != (self.n_dec, self.ctx_sum, self.phase):
            raise AssertionError(
                f"decode aggregates {(self.n_dec, self.ctx_sum)} != recomputed {(n, ctx)}"
            )
        if len(self.running) > self.max_num_seqs:
            raise AssertionError("more running requests than max_num_seqs")
        for r in self.waiting:
            if r.status not in (RequestStatus.WAITING, RequestStatus.PREEMPTED) or r.kv_path:
                raise AssertionError(f"{r} in waiting queue holds KV or has a bad state")
            if r.reserved_blocks:
                raise AssertionError(f"{r} in waiting queue holds a reservation")
        reserved = sum(r.reserved_blocks for r in self.running)
        if reserved != self.reserved_blocks or reserved > self.kv.num_blocks:
            raise AssertionError(f"reservations {self.reserved_blocks} != running's {reserved}")
        self.kv.check(private)
        if self.kv.used > self.kv.num_blocks:
            raise AssertionError("KV blocks in use exceed capacity")


def _reason(r: Request) -> FinishReason:
    max_tokens = r.spec.max_tokens
    if max_tokens is not None and r.num_output_tokens >= max_tokens:
        return FinishReason.LENGTH
    return FinishReason.STOP
