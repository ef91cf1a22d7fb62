"""`specdec distill`: train a small draft model for any target, by logit distillation."""
