from roles.slurm_controller.tasks import slurm_controller

slurm_controller()
