from roles.slurm_worker.tasks import slurm_worker

slurm_worker()
