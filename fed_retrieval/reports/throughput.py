"""Training throughput of the federated simulation, of centralized Keras, and
of the machine's reference: a tight `tf.function` loop.

All three train the same dual encoder with the same loss and batch size on the
same training users' examples; the figures are examples per second of training
after one warm-up (tracing, worker start-up) run. The tight loop (SGD steps
over batches already in memory, one `tf.function` per chunk of steps, with
and without XLA, the faster counting) is what this model costs on this
machine with no input pipeline or framework overhead: the other two are
reported as fractions of it.
"""

import math
import time
from typing import Dict

import numpy as np
import tensorflow as tf

from fed_retrieval.algorithms import fedavg
from fed_retrieval.algorithms import optimizers
from fed_retrieval.models import dual_encoder
from fed_retrieval.runtime import process_memory
from fed_retrieval.runtime import tff_runtime
from fed_retrieval.training import client_sampling
from fed_retrieval.training import federated_loop
from fed_retrieval.training.federated_loop import FederatedConfig
from losses import registry
from tasks import client_data
from tasks.movielens.movielens_task import MovieLensTask


def federated_throughput(task: MovieLensTask, config: FederatedConfig,
                         rounds: int) -> Dict[str, float]:
  """Examples/s and seconds/round of `rounds` timed rounds after a warm-up
  round, and the peak memory of the process tree (this process and the TFF
  worker) meanwhile.

  The worker is stopped afterwards, so it cannot compete with what runs next.
  """
  with tff_runtime.local_execution_context(), \
       process_memory.ProcessTreePeak() as peak:
    model_config = federated_loop.model_config_for(task, config, 16)
    process = fedavg.build_learning_process(
        fedavg.retrieval_model_fn(model_config, config.objective),
        config)
    data = client_data.ClientDatasets.from_examples(
        task.federated_train, config.objective.build().candidates == "batch")
    sampler = client_sampling.sampler_for(data, config)
    state = process.initialize()
    examples, seconds = 0, 0.0
    for round_num in range(rounds + 1):
      clients = sampler.sample(config.clients_per_round, config.seed, round_num)
      start = time.perf_counter()
      output = process.next(state, federated_loop.round_datasets(
          data, clients, config, round_num))
      elapsed = time.perf_counter() - start
      state = output.state
      if round_num > 0:  # Round 0 warms up.
        seconds += elapsed
        examples += int(output.metrics["client_work"]["train"]["num_examples"])
  return {"federated_examples_per_sec": examples / seconds,
          "seconds_per_round": seconds / rounds,
          "examples_per_round": examples / rounds,
          "memory": peak.report()}


def _objective_and_model(task: MovieLensTask, loss: str):
  """The default objective of `loss` and a fresh dual encoder for it, as
  training sees it (`dual_encoder.training_model`)."""
  objective = registry.objective(loss)
  config = dual_encoder.DualEncoderConfig(task.vocabulary_size,
                                          task.config.max_context_length,
                                          spreadout=objective.spreadout)
  return objective, dual_encoder.training_model(
      dual_encoder.build_dual_encoder(config, seed=0), objective.candidates)


def centralized_throughput(task: MovieLensTask, loss: str, batch_size: int,
                           num_examples: int, steps_per_execution: int,
                           learning_rate: float = 0.01) -> Dict[str, float]:
  """Examples/s of Keras `fit` over `num_examples` after a warm-up epoch."""
  objective, model = _objective_and_model(task, loss)
  model.compile(optimizer=optimizers.keras_optimizer("sgd", learning_rate),
                loss=objective.loss, steps_per_execution=steps_per_execution)
  dataset = client_data.centralized_dataset(
      task.federated_train, batch_size, shuffle_seed=0,
      positives_as_input=objective.candidates == "batch").repeat()
  steps = math.ceil(num_examples / batch_size)
  model.fit(dataset, steps_per_epoch=steps_per_execution, epochs=1, verbose=0)
  start = time.perf_counter()
  model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0)
  return {"centralized_examples_per_sec": steps * batch_size /
                                          (time.perf_counter() - start)}


def tight_loop_throughput(task: MovieLensTask, loss: str, batch_size: int,
                          num_examples: int, jit_compile: bool,
                          learning_rate: float = 0.01) -> float:
  """Examples/s of plain SGD steps over pre-batched tensors, after a warm-up."""
  objective, model = _objective_and_model(task, loss)
  optimizer = tf.keras.optimizers.SGD(learning_rate)
  examples = task.federated_train
  steps = max(1, min(num_examples, len(examples)) // batch_size)
  order = np.random.default_rng(0).permutation(len(examples))[:steps * batch_size]
  contexts = tf.constant(examples.contexts[order].astype(np.int32).reshape(
      steps, batch_size, -1))
  labels = tf.constant(examples.labels[order].astype(np.int32).reshape(
      steps, batch_size))

  @tf.function(jit_compile=jit_compile)
  def train_step(context, label):
    inputs = (context, label) if objective.candidates == "batch" else context
    with tf.GradientTape() as tape:
      loss_value = tf.reduce_mean(objective.loss(label, model(inputs, training=True)))
      loss_value += tf.add_n(model.losses) if model.losses else 0.0
    gradients = tape.gradient(loss_value, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))

  @tf.function
  def train(first: tf.Tensor, last: tf.Tensor) -> None:
    for step in tf.range(first, last):
      train_step(contexts[step], labels[step])

  warm_up = min(steps, 50)
  train(tf.constant(0), tf.constant(warm_up))
  start = time.perf_counter()
  train(tf.constant(0), tf.constant(steps))
  return steps * batch_size / (time.perf_counter() - start)
