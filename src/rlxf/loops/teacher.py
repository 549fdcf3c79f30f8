"""Placing the teacher of on-policy distillation: loaded from ``model.teacher_path``, checked to share the
policy's tokenizer (it scores the policy's token ids as they are: nothing is retokenized), then placed
through the runtime as role ``teacher``, like the reference."""

from __future__ import annotations

from rlxf.config import Config, ConfigError
from rlxf.loops.setup import RunContext
from rlxf.models.loading import load_causal_lm, load_tokenizer, resolve_model_path
from rlxf.roles.teacher import TeacherRole
from rlxf.runtime import Runtime


def place_teacher(config: Config, runtime: Runtime, context: RunContext) -> TeacherRole | None:
    """The teacher role when the advantage estimator reads one (``algorithm.uses_teacher``), else None."""
    if not config.algorithm.uses_teacher:
        return None
    return runtime.place("teacher", TeacherRole, load_teacher(config, context), config.train.micro_batch_size,
                         config.rollout.temperature, config.train.logits_chunk_tokens)


def load_teacher(config: Config, context: RunContext):
    """``model.teacher_path``'s model, checked to share the policy's tokenizer."""
    path = resolve_model_path(config.model.teacher_path)
    check_shared_tokenizer(config, path, context.tokenizer)
    teacher = load_causal_lm(path, config.model.dtype, context.device, config.model.allow_download)
    width = teacher.get_input_embeddings().num_embeddings
    if width < len(context.tokenizer):
        raise ConfigError(f"model.teacher_path {config.model.teacher_path!r}: its embedding has {width} rows, fewer "
                          f"than the policy tokenizer's {len(context.tokenizer)} tokens; the teacher must share "
                          "the policy's tokenizer")
    return teacher


def check_shared_tokenizer(config: Config, teacher_path: str, tokenizer) -> None:
    """One ConfigError naming both paths when the teacher's tokenizer maps any token to another id."""
    try:
        theirs = load_tokenizer(teacher_path, config.model.allow_download)
    except OSError:  # a folder of weights alone: the embedding-width check above is all there is
        return
    if theirs.get_vocab() != tokenizer.get_vocab():
        raise ConfigError(f"model.teacher_path {config.model.teacher_path!r} has another tokenizer than model.path "
                          f"{config.model.path!r}; on-policy distillation scores the policy's token ids, so the "
                          "teacher must share the policy's tokenizer")
