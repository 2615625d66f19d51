"""The sphere and its discretisations.

* :mod:`~wflow.geometry.sphere` — tangent projection, exponential map, geodesic distance,
  samplers on ``S^{d-1}``;
* :mod:`~wflow.geometry.mesh` — triangulated spheres: generation, files, validation,
  the shipped meshes and the DOLFINx mesh (:class:`~wflow.geometry.mesh.SphereMesh`);
* :mod:`~wflow.geometry.density` — initial densities on meshes and samplers of particles;
* :mod:`~wflow.geometry.transport` — exact ``W_2`` on the sphere with POT (the referee);
* :mod:`~wflow.geometry.harmonics` — spherical-harmonic moments of tokens and of cell
  masses (linear statistics, ``O(n L²)``, distributable);
* :mod:`~wflow.geometry.moment_test` — the particle–PDE moment test (replicate standard
  errors, Šidák max-|t|, Hotelling ``T²``, MMD).
"""
