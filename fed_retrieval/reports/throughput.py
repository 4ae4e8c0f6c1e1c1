"""Training throughput of every federated algorithm, of centralized Keras on
the same examples, and of the machine's reference: a tight `tf.function` loop.

A `Workload` is one algorithm on one task: its process and clients (as the
run loop drives them), and the Keras model and loss that train centrally on
the pooled examples of the same clients. For each it measures, in examples
per second of training after a warm-up (tracing, the worker's start):
- federated: `rounds` rounds of `clients_per_round` sampled clients after
  `warmup_rounds` untimed ones (the first traces; on `xc_small` the next three
  still took 1.1-1.8x a steady round, which a run of hundreds of rounds does
  not see), with the peak memory of the process tree (this process and the
  TFF worker) while those warm up;
- centralized: Keras `fit` with SGD over the pooled examples as the
  centralized runs train (a chunk of batches a Keras step, `chunked_steps`,
  whose plain SGD steps in place), the best of several `steps_per_execution`
  (batches a chunk), with XLA where the family's centralized runs under SGD
  use it (`FederatedJob.central`);
- tight loop: SGD steps of the same model and loss over batches already in
  memory, updating the weights in place (`optimizers.sgd_in_place`), one
  `tf.function` per chunk of steps, with and without XLA, the faster
  counting: what the model costs here with no input pipeline or framework
  around it. Federated and centralized are reported as fractions of it, and
  centralized also as a fraction of the same loop stepping through Keras's
  SGD (the best of with and without XLA): what `fit` and its input cost apart
  from Keras's optimizer (its bookkeeping, sparse rows deduplicated).
The three are measured in `repeats` trials, each its federated rounds (the
next ones of the same process) followed at once by centralized and the tight
loops on as many examples; a fraction is taken within a trial and reported
as the median over the trials with its range. This machine's speed moved by
up to 40% between the minutes of one run: when the tight loop was timed
minutes after the federated rounds (the best of 3 runs), the same fraction
read 0.74 in one run and 1.14 in the next.
For FedAwS and FedSS the centralized model and the tight loop are the full
classifier (every class's score for every point), which a client does not
compute: their fractions can pass 1.
"""

import contextlib
import dataclasses
import math
import time
from typing import Any, Callable, Dict, Iterator, List, Sequence, Tuple

import numpy as np
import tensorflow as tf

from fed_retrieval.algorithms import optimizers
from fed_retrieval.algorithms import sub_model
from fed_retrieval.runtime import process_memory
from fed_retrieval.runtime import tff_runtime
from fed_retrieval.training import chunked_steps
from fed_retrieval.training import round_calls
from tasks import client_data

# The centralized and tight-loop SGD rate (the figures do not depend on it).
LEARNING_RATE = 0.01


@dataclasses.dataclass
class Workload:
  """One algorithm on one task, as the benchmark measures it. `loop` gives the
  round's settings (clients_per_round, batch_size, local_epochs,
  max_local_steps, client_sampling, seed); `client_shards` the shard datasets
  the process's `next` takes (0: one per client)."""
  name: str
  build_process: Callable[[], sub_model.Process]
  clients: client_data.ClientDatasets
  loop: Any
  build_model: Callable[[], tf.keras.Model]  # What trains centrally, uncompiled.
  loss: tf.keras.losses.Loss
  client_shards: int = 0
  centralized_jit_compile: bool = False  # As the family's centralized runs.


@contextlib.contextmanager
def _workers(count: int) -> Iterator[None]:
  """The execution context of `count` local workers (0: the usual one, a
  single worker without the mergeable context), stopped afterwards."""
  if not count:
    with tff_runtime.local_execution_context():
      yield
    return
  workers = [tff_runtime.LocalWorker() for _ in range(count)]
  try:
    tff_runtime.set_workers_execution_context([w.start() for w in workers])
    yield
  finally:
    for worker in workers:
      worker.stop()


class FederatedRounds:
  """The workload's process on the current execution context, driven as the
  run loop drives it (`round_calls.RoundCalls`: newly sampled clients each
  round, a call each): `run(rounds)`
  trains the next rounds and says how many examples they trained and in how
  many seconds (sampling and building the rounds' datasets, as a run does,
  and the calls). The first `warmup_rounds` run untimed at construction."""

  def __init__(self, workload: Workload, warmup_rounds: int):
    self._process = workload.build_process()
    self._calls = round_calls.RoundCalls(self._process, workload.clients, workload.loop,
                                         workload.client_shards)
    self._state = self._process.initialize()
    self._next_round = 1  # Rounds count from 1, as a run's do.
    self.run(warmup_rounds)

  def run(self, rounds: int) -> Tuple[int, float]:
    examples, seconds = 0, 0.0
    for _ in range(rounds):
      start = time.perf_counter()
      self._state, metrics = self._calls.next(self._state, self._next_round)
      seconds += time.perf_counter() - start
      examples += int(metrics["client_work"]["train"]["num_examples"])
      self._next_round += 1
    return examples, seconds


def federated_rate(workload: Workload, rounds: int, workers: int = 0,
                   warmup_rounds: int = 5) -> Dict[str, Any]:
  """Examples/s and seconds a round over `rounds` timed rounds after
  `warmup_rounds` untimed ones, and the process tree's peak memory meanwhile,
  on one local worker or split across `workers` local workers. The workers are
  stopped afterwards, so they cannot compete with what runs next."""
  with _workers(workers), process_memory.ProcessTreePeak() as peak:
    examples, seconds = FederatedRounds(workload, warmup_rounds).run(rounds)
  return {"federated_examples_per_sec": examples / seconds,
          "seconds_per_round": seconds / rounds,
          "examples_per_round": examples / rounds,
          "federated_memory": peak.report()}


def round_breakdown(workload: Workload, repeats: int = 3) -> Dict[str, float]:
  """Where a round's time goes, in milliseconds, from rounds of chosen shapes
  on one local worker (median of `repeats` after a warm-up each): `fixed`, a
  round of one client with one batch (the broadcast, the server's step, the
  call into the worker and back); `per_client`, what each further client adds
  (with one batch each); `per_batch`, what each further batch adds (clients
  of `max_local_steps` batches); `datasets`, building a round's datasets in
  Python. The clients are the workload's first, in turn."""
  loop = workload.loop
  clients, shards = workload.clients, workload.client_shards
  count = min(loop.clients_per_round, len(clients.client_ids))
  steps = loop.max_local_steps or 8
  one_batch = dataclasses.replace(loop, max_local_steps=1, local_epochs=1)
  many_batches = dataclasses.replace(loop, max_local_steps=steps, local_epochs=10)
  with tff_runtime.local_execution_context():
    process = workload.build_process()
    state = process.initialize()

    def seconds(config, ids):
      data = round_calls.round_datasets(clients, ids, config, 0, shards)
      process.next(state, data)  # Warm-up: tracing, caches.
      times = []
      for _ in range(repeats):
        start = time.perf_counter()
        process.next(state, round_calls.round_datasets(clients, ids, config, 0,
                                                        shards))
        times.append(time.perf_counter() - start)
      return float(np.median(times))

    ids = clients.client_ids[:count]
    fixed = seconds(one_batch, ids[:1])
    clients_one_batch = seconds(one_batch, ids)
    clients_many_batches = seconds(many_batches, ids)
    start = time.perf_counter()
    round_calls.round_datasets(clients, ids, loop, 0, shards)
    datasets = time.perf_counter() - start
  batches = sum(min(steps, -(-10 * clients.num_examples(c) // loop.batch_size))
                for c in ids)
  return {"clients": count,
          "fixed_ms": round(1e3 * fixed, 1),
          "per_client_ms": round(1e3 * (clients_one_batch - fixed) / max(count - 1, 1), 2),
          "per_batch_ms": round(1e3 * (clients_many_batches - clients_one_batch) /
                                max(batches - count, 1), 3),
          "datasets_ms": round(1e3 * datasets, 1)}


class _ChunkEndTimes(tf.keras.callbacks.Callback):
  """When each Keras step (a chunk of batches) of `fit` ended."""

  def __init__(self):
    super().__init__()
    self.times: List[float] = []

  def on_train_batch_end(self, batch, logs=None):
    self.times.append(time.perf_counter())


def centralized_rate(workload: Workload, num_examples: int,
                     steps_per_execution: int) -> float:
  """Examples/s of Keras `fit` (SGD) over the pooled examples, as the
  centralized runs train: `steps_per_execution` batches a Keras step
  (`chunked_steps`). Timed from the end of the first step to the end of the
  last, within one `fit`: the first step traces, and starts the input's
  first pass (its shuffle of every row, which a run spends once a pass, not
  once per the few rounds' worth of examples timed here)."""
  batch_size = workload.loop.batch_size
  model = chunked_steps.ChunkedSteps.on(
      workload.build_model(), batch_jit_compile=workload.centralized_jit_compile)
  model.compile(optimizer=optimizers.keras_optimizer("sgd", LEARNING_RATE),
                loss=workload.loss)
  chunks = math.ceil(num_examples / batch_size / steps_per_execution) + 1
  batches = chunks * steps_per_execution
  ends = _ChunkEndTimes()
  model.fit(client_data.shuffled_chunks(workload.clients.pooled(), batch_size, batches,
                                        steps_per_execution, shuffle_seed=0),
            steps_per_epoch=chunks, epochs=1, verbose=0, callbacks=[ends])
  return (chunks - 1) * steps_per_execution * batch_size / (ends.times[-1] - ends.times[0])


def tight_loop_rate(workload: Workload, num_examples: int, jit_compile: bool,
                    keras_sgd: bool = False) -> float:
  """Examples/s of plain SGD steps over batches already in memory, each
  updating the weights in place (`optimizers.sgd_in_place`: no optimizer
  framework), or with `keras_sgd` through Keras's SGD (what the centralized
  runs' optimizers cost on top: its bookkeeping, sparse rows deduplicated)."""
  batch_size = workload.loop.batch_size
  model = workload.build_model()
  keras_optimizer = tf.keras.optimizers.SGD(LEARNING_RATE) if keras_sgd else None
  inputs, labels = workload.clients.pooled()
  steps = max(1, min(num_examples, len(labels)) // batch_size)
  order = np.random.default_rng(0).permutation(len(labels))[:steps * batch_size]
  stacked = lambda a: tf.constant(a[order].reshape((steps, batch_size) + a.shape[1:]))
  inputs, labels = tf.nest.map_structure(stacked, (inputs, labels))

  @tf.function(jit_compile=jit_compile)
  def train_step(batch_inputs, batch_labels):
    with tf.GradientTape() as tape:
      loss_value = tf.reduce_mean(workload.loss(batch_labels,
                                                model(batch_inputs, training=True)))
      loss_value += tf.add_n(model.losses) if model.losses else 0.0
    gradients = tape.gradient(loss_value, model.trainable_variables)
    if keras_sgd:
      keras_optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    else:
      optimizers.sgd_in_place(model.trainable_variables, gradients, LEARNING_RATE)

  @tf.function
  def train(first: tf.Tensor, last: tf.Tensor) -> None:
    for step in tf.range(first, last):
      train_step(tf.nest.map_structure(lambda t: t[step], inputs), labels[step])

  train(tf.constant(0), tf.constant(min(steps, 50)))
  start = time.perf_counter()
  train(tf.constant(0), tf.constant(steps))
  return steps * batch_size / (time.perf_counter() - start)


def _trial(workload: Workload, federated_rounds: FederatedRounds, rounds: int,
           steps_per_execution: Sequence[int]) -> Dict[str, Any]:
  """One trial: `rounds` federated rounds, then centralized and the tight
  loops on as many examples, back to back, with the fractions of the fastest
  tight loop (and Keras-SGD loop) of this trial."""
  examples, seconds = federated_rounds.run(rounds)
  centralized = {str(s): centralized_rate(workload, examples, s)
                 for s in steps_per_execution}
  tight = {f"xla={jit}": tight_loop_rate(workload, examples, jit) for jit in (False, True)}
  keras_tight = {f"xla={jit}": tight_loop_rate(workload, examples, jit, True)
                 for jit in (False, True)}
  federated = examples / seconds
  best_centralized, best_tight = max(centralized.values()), max(tight.values())
  return {
      "federated_examples_per_sec": federated,
      "centralized_examples_per_sec": best_centralized,
      "tight_loop_examples_per_sec": best_tight,
      "keras_sgd_tight_loop_examples_per_sec": max(keras_tight.values()),
      "federated_fraction_of_tight_loop": federated / best_tight,
      "centralized_fraction_of_tight_loop": best_centralized / best_tight,
      "centralized_fraction_of_keras_sgd_tight_loop":
          best_centralized / max(keras_tight.values()),
      "seconds_per_round": seconds / rounds,
      "examples_per_round": examples / rounds,
      "centralized_by_steps_per_execution": centralized,
      "tight_loop_by_xla": tight,
      "keras_sgd_tight_loop_by_xla": keras_tight,
  }


_FRACTIONS = ("federated_fraction_of_tight_loop", "centralized_fraction_of_tight_loop",
              "centralized_fraction_of_keras_sgd_tight_loop")


def _range_key(fraction_key: str) -> str:
  """Where a row keeps a fraction's [min, max] over its trials."""
  return fraction_key.replace("fraction", "fraction_range")


def _median_of(trials: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
  """Every figure of the trials as its median (per key in the nested ones),
  to 3 decimals; of one trial, its figures rounded."""
  median = lambda values: round(float(np.median(values)), 3)
  return {key: ({k: median([t[key][k] for t in trials]) for k in value}
                if isinstance(value, dict) else median([t[key] for t in trials]))
          for key, value in trials[0].items()}


def measure(workload: Workload, rounds: int,
            steps_per_execution: Sequence[int] = (1, 100),
            local_workers: Sequence[int] = (), repeats: int = 3,
            warmup_rounds: int = 5) -> Dict[str, Any]:
  """The benchmark's row of one workload: `repeats` trials (`_trial`) on one
  worker, after `warmup_rounds`, each reported; every figure the median over
  the trials, and each fraction with its range. A trial's federated rounds
  and its centralized and tight-loop runs follow each other within seconds,
  so a fraction compares figures of one speed of the VM (which moved by up
  to 40% between the minutes of one run). The memory is the process tree's
  peak while the process is built and its warm-up rounds run (the timed
  rounds are the same kind). With `local_workers`, also the seconds a round
  when the clients are split across that many local workers."""
  with _workers(0):
    with process_memory.ProcessTreePeak() as peak:
      federated_rounds = FederatedRounds(workload, warmup_rounds)
    trials = [_trial(workload, federated_rounds, rounds, steps_per_execution)
              for _ in range(repeats)]
  by_workers = {str(n): round(federated_rate(workload, rounds, n, warmup_rounds)[
      "seconds_per_round"], 3) for n in local_workers}
  row = {"workload": workload.name, **_median_of(trials)}
  for key in _FRACTIONS:
    row[_range_key(key)] = [
        round(min(t[key] for t in trials), 3), round(max(t[key] for t in trials), 3)]
  return {**row, "trials": [_median_of([t]) for t in trials],
          "federated_memory": peak.report(),
          **({"seconds_per_round_by_local_workers": by_workers} if by_workers else {})}


def _fraction_cell(row: Dict[str, Any], key: str) -> str:
  """'0.44 (0.41-0.48)': the median over the trials and their range."""
  low, high = row[_range_key(key)]
  median = f"{row[key]:.2f}"
  return median if len(row["trials"]) == 1 else f"{median} ({low:.2f}-{high:.2f})"


def markdown_table(rows: Sequence[Dict[str, Any]]) -> str:
  """The rows as a markdown table: medians over the trials, and each
  fraction's range over them."""
  lines = ["| workload | federated ex/s | centralized ex/s | tight loop ex/s | "
           "tight loop, Keras SGD ex/s | federated / tight | centralized / tight | "
           "centralized / Keras-SGD tight | s a round | tree peak GB |",
           "|" + "---|" * 10]
  for row in rows:
    lines.append(
        f"| {row['workload']} | {row['federated_examples_per_sec']:,.0f} | "
        f"{row['centralized_examples_per_sec']:,.0f} | "
        f"{row['tight_loop_examples_per_sec']:,.0f} | "
        f"{row['keras_sgd_tight_loop_examples_per_sec']:,.0f} | "
        f"{' | '.join(_fraction_cell(row, key) for key in _FRACTIONS)} | "
        f"{row['seconds_per_round']:.2f} | "
        f"{row['federated_memory']['peak_rss_mb'] / 1e3:.2f} |")
  return "\n".join(lines) + "\n"


def workload(run: Any) -> Workload:
  """A family's federated run (`tasks.family.FederatedRun`) as the benchmark
  measures it: its job's process and clients, and centrally the model and
  loss its job names (`FederatedJob.central`)."""
  job = run.job()
  if job.central is None:
    raise ValueError(f"{job.name}: its job names no central model to compare with")
  return Workload(name=job.name, build_process=job.build_process, clients=job.clients,
                  loop=run.loop, build_model=job.central.build_model,
                  loss=job.central.loss, client_shards=job.client_shards,
                  centralized_jit_compile=job.central.jit_compile)


def report(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
  """The JSON report: every row, and the smallest fractions of the tight loop."""
  return {"rows": rows,
          "min_federated_fraction_of_tight_loop": min(
              r["federated_fraction_of_tight_loop"] for r in rows),
          "min_centralized_fraction_of_tight_loop": min(
              r["centralized_fraction_of_tight_loop"] for r in rows)}
