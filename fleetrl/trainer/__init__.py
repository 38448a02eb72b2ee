"""The trainer: group advantages, the off-policy-corrected policy loss, and the train step."""
