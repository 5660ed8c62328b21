"""What trains or changes weights in PyTorch: models, fine-tuning, the teacher, distillation, head pruning, transfer-set augmentation."""
