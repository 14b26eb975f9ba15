"""Drop-ins that put ``ecpo_train.core.credit`` inside other trainers; none of them imports the trainer it serves."""
