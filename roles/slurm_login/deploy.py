from roles.slurm_login.tasks import slurm_login

slurm_login()
