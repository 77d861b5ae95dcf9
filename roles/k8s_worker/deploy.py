from roles.k8s_worker.tasks import k8s_worker

k8s_worker()
