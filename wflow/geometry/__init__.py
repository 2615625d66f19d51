"""The sphere and its discretisations.

* :mod:`~wflow.geometry.sphere` — tangent projection, exponential map, geodesic distance,
  samplers on ``S^{d-1}``;
* :mod:`~wflow.geometry.mesh` — triangulated spheres: generation, files, validation,
  the shipped meshes and the DOLFINx mesh (:class:`~wflow.geometry.mesh.SphereMesh`);
* :mod:`~wflow.geometry.density` — initial densities on meshes and samplers of particles;
* :mod:`~wflow.geometry.transport` — exact ``W_2`` on the sphere with POT (the referee).
"""
