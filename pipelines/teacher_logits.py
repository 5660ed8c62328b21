"""Stage `teacher_logits`: run the teacher once over the transfer set and cache its logits,
so distillation and recovery epochs never rerun the teacher."""
from compress.core import distributed
from compress.core.config import section
from compress.data.prepare import Prepared
from compress.training.distill import CacheConfig, cache_teacher_outputs

from .common import CACHE, MODELS, PREPARED, run


def main(params: dict) -> None:
    cfg = section(params, "teacher_logits", CacheConfig)
    meta = cache_teacher_outputs(MODELS / "teacher", Prepared.open(PREPARED), CACHE, cfg)
    if not distributed.is_main():
        return
    print(f"cached teacher logits for {meta['rows']} rows in {meta['wall_s']} s "
          f"(teacher agrees with train labels on {meta['teacher_train_accuracy']:.2%})")


if __name__ == "__main__":
    run(main, launch=lambda params: True)  # the pass is sharded over the ranks
