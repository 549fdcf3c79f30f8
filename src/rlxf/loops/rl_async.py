"""The asynchronous RL controller (``loop: rl_async``): generation overlaps training, staleness bounded.

    producer (beside the rollout engine: a thread in this process, or inside the rollout actor on Ray):
              prompts -> continuously batched, interruptible generation -> rewards -> queue
              (loops/async_producer.py)
    trainer (this loop): batch from the queue -> staleness check -> train_on_batch (the sync loop's
                         stage) -> post the new weights to the producer -> eval -> checkpoint

``async_rl.max_staleness`` bounds ``trainer version - sample version`` (a sample's version is its
oldest token's; the trainer holds version ``step - 1`` while it trains step ``step``). The producer
*waits* rather than generating a sample that would break the bound, so no work is thrown away; the
trainer re-checks and drops violators (``async/dropped_stale``, expected 0). ``max_staleness: 0`` is
the synchronous schedule, ``1`` one-step-off-policy.

Off-policy correction (on by default, ``async_rl.off_policy_correction``): ``algorithm.tis_level``
``none`` becomes ``token`` (unless ``algorithm.rollout_mask`` is a mode that weights kept tokens itself:
``mis_token``, ``mis_sequence``, ``icepop``): each token's loss is weighted by ``min(pi_old / pi_rollout, tis_cap)``,
where ``pi_rollout`` are the log-probs recorded at sampling (whatever version produced the token)
and ``pi_old`` the trainer's log-probs before the update. With several mini-batches or PPO epochs
``old_log_probs`` are recomputed by the trainer, which makes this decoupled PPO: the clip is taken
against that proximal policy and the IS weight corrects proximal vs behaviour policy.

Checkpoints hold the trained steps only: the data position and sampling generator state saved at
step ``k`` are those right after batch ``k`` was drawn; queued or in-flight batches are dropped. A
resumed run regenerates from the checkpoint's weights (version ``k``), so its first samples have
staleness 0 and the bound holds across a resume.

Where the producer runs: with ``runtime.kind: embedded`` it is a thread of this process and shares
the GIL with the trainer (little overlap for small models on a CPU); with ``runtime.kind: ray`` it
runs inside the rollout actor (``runtime.attach``), so generation and training overlap in separate
processes. Weights go from the trainer's actor to the rollout actor (object store). Held-out evaluation
borrows the producer's engine between chunks, after loading the weights posted last. Not supported here: DAPO dynamic sampling, ReMax's greedy baseline,
multi-turn environments. A rollout actor (Ray) or child process (process runtime) that dies is
restarted and a new producer starts beside it from the last trained step (loops/async_restart.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rlxf.algos import ROLLOUT_MASKS
from rlxf.config import Config
from rlxf.loops import LOOPS
from rlxf.loops.async_producer import LentRollout, sample_versions, start_producer
from rlxf.loops.async_restart import RestartingProducer
from rlxf.loops.batch_scorer import BatchScorer
from rlxf.loops.failed_steps import FailedSteps
from rlxf.loops.rl import StageTimer, train_on_batch
from rlxf.loops.rl_session import start_session
from rlxf.loops.run_state import settle_finished_checkpoints
from rlxf.loops.summary import write_summary
from rlxf.runtime.weight_sync import exported_weights
from rlxf.train.checkpoint import generator_state_to_json


def async_config(config: Config) -> Config:
    """Switch on off-policy correction. (What this loop does not support is refused at config load:
    rlxf.loops.LOOP_NEEDS.)"""
    algo = config.algorithm
    mask = ROLLOUT_MASKS.get(algo.rollout_mask)
    if mask is not None and mask.weighted:  # the mask's kept tokens carry their own ratio weight
        return config
    if config.async_rl.off_policy_correction and algo.tis_level == "none":
        config = config.model_copy(update={"algorithm": algo.model_copy(update={"tis_level": "token"})})
    return config


@LOOPS.register("rl_async")
def train_rl_async(config: Config, resume: bool = False, write: Callable[[str], None] = print) -> dict:
    config = async_config(config)
    acfg, algo, tcfg = config.async_rl, config.algorithm, config.train
    session = start_session(config, resume, write)
    run_dir, context, state, rollout, actor = session.run_dir, session.context, session.state, session.rollout, session.actor
    params, sample_gen, shuffle_gen = session.params, session.sample_gen, session.shuffle_gen

    scorer = BatchScorer(session.runtime.portable(context.reward, config.reward), algo, params.max_new_tokens)
    bucket_bytes = int(config.runtime.weight_sync.bucket_mb * 2**20)

    def start():  # a producer from the last trained step (a fresh run: step 0)
        return session.runtime.attach(
            rollout, start_producer, scorer, context.task.train, config.seed, state.data_position,
            state.sample_rng or generator_state_to_json(sample_gen), state.step + 1, tcfg.prompts_per_step,
            params, acfg, config.runtime.weight_sync.checksum,
        )

    trained = {"version": state.step}  # the version of the actor's weights right now

    def post_latest(fresh) -> None:
        fresh.post_weights(exported_weights(actor, trained["version"], bucket_bytes))

    producer = RestartingProducer(session.runtime, rollout, start, post_latest, config.runtime.max_restarts)
    progress = session.progress_bar()
    failed_steps = FailedSteps(config.env.max_failed_steps)
    try:
        for step in range(state.step + 1, tcfg.steps + 1):
            if session.stop.requested:  # came before this step (during the step-0 evaluation): that one is saved
                break
            timer, metrics, step_start = StageTimer(config.runtime.trim_memory), {}, time.perf_counter()
            with timer("wait_for_rollout"):
                item = producer.get()
            assert item.index == step, (item.index, step)
            failed_steps.observe(item.batch, step)  # every trajectory failed, step after step: stop
            staleness = (step - 1) - sample_versions(item.batch)
            fresh = (staleness <= acfg.max_staleness).nonzero().squeeze(1)
            batch = item.batch if len(fresh) == len(item.batch) else item.batch.select(fresh)
            metrics.update(item.scores)
            metrics.update({
                "async/staleness_mean": float(staleness.float().mean()),
                "async/staleness_max": float(staleness.max()),
                "async/dropped_stale": float(len(item.batch) - len(fresh)),
                "async/interruptions": float(item.interruptions),
                "async/queue_max": float(item.queued_max),
                "async/inflight_max": float(item.inflight_max),
                "async/producer_restarts": float(producer.restarts),
                "async/oldest_version": float(sample_versions(batch).min()),
                "time/generation": item.generation_seconds,
            })
            batch = batch.to(context.device)
            train_on_batch(session, batch, timer, metrics)
            session.logger.log_samples(step, batch, context.tokenizer)  # logging.samples_every: samples.jsonl, trackers
            trained["version"] = step
            # the state of the trained step before the weight sync: a producer restarted during the
            # sync (the rollout actor died loading these weights) must start after this step
            state.step, state.data_position, state.sample_rng = step, item.data_position, item.sample_rng
            state.shuffle_rng = generator_state_to_json(shuffle_gen)
            with timer("weight_sync"):
                producer.post_weights(exported_weights(actor, step, bucket_bytes))
            session.evaluate_if_due(step, timer, metrics, LentRollout(producer))
            progress.update(1)
            if session.end_step(step_start, timer, metrics):  # a stop signal: this step is checkpointed
                break
    finally:
        producer.stop()
        progress.close()
        stopped = session.close()  # also on an error: release the roles and the stop-signal handlers
    if not stopped:  # the run reached its last step
        settle_finished_checkpoints(run_dir, state, config.checkpoint)
    return write_summary(run_dir, state, session.wall_seconds, state.step, {"max_staleness": acfg.max_staleness, **stopped})
