from roles.k8s_control_plane.tasks import k8s_control_plane

k8s_control_plane()
