# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 11 · O Cache Explorer: brinque com todos os caches, ao vivo
#
# **Objetivo de aprendizagem.** Use o explorador para testar suas próprias previsões: escolha um modelo e um cache,
# aperte Executar e veja o cache encher, dar a volta, ser mascarado, quantizado, descarregado e recortado enquanto os
# tokens aparecem.
#
# **Nas palavras do kvlab.** O explorador é um pequeno app construído sobre tudo o que os notebooks anteriores
# mediram. Executar gera de forma gulosa (greedy) com um cache instrumentado em uma thread em segundo plano (para que a
# página continue respondendo e Parar funcione); a cada poucos tokens, redesenha três gráficos a partir do `Trace` do
# cache:
# - **bytes guardados por tipo de camada** em função do passo (o passo 0 é o pré-preenchimento);
# - **posições alocadas, ocupadas e mascaradas**, somadas sobre as camadas: a diferença entre alocadas e ocupadas é o
#   desperdício de um cache estático;
# - **um mapa camada × posição**: azul = ocupada, cinza = mascarada (alocada, mas vazia), laranja = descartada por uma
#   janela deslizante, roxo/azul-claro = quantizada/resíduo em precisão total, vermelho = recortada.
#
# Só aparecem as opções que se aplicam ao cache escolhido. Combinações inválidas são explicadas no próprio app.
# "Adicionar à comparação" guarda uma execução, desenhada tracejada e como uma linha da tabela; o controle de recorte
# aplica `cache.crop(-n)` ao cache da última execução e explica a regra quando o recorte não pode ser desfeito.
#
# O mesmo app roda sem Jupyter: `kvlab explore` o serve com Voila em 127.0.0.1.

# %%
import kvlab

kvlab.set_language("pt-BR")

# %%
import transformers
from IPython.display import HTML, Image

from kvlab.explorer import explore

transformers.logging.disable_progress_bar()
transformers.logging.set_verbosity_error()
explorer = explore(model_name="smollm2", preload=True)
explorer

# %% [markdown]
# Brinque aí em cima. Abaixo, o mesmo app controlado por código (os botões chamam estes mesmos métodos), para que este
# notebook também mostre seus resultados quando lido sem um kernel em execução.
#
# ## 1. O desperdício, visto ao vivo
#
# **Preveja primeiro.** O SmolLM2 tem 30 camadas de atenção completa. Com um cache estático de `max_cache_len=64`, a
# pergunta pré-definida (preset) de 21 tokens e 8 tokens novos, quantas posições ficam alocadas, quantas ocupadas e
# quantas mascaradas?

# %%
demo = explore(model_name="smollm2")
demo.run_and_wait(cache="static", max_cache_len=64, max_new_tokens=8, preset="kv_cache_question")
Image(demo.plot.value)

# %%
# NBVAL_CHECK_OUTPUT
row = demo.summary_rows()[-1]
print(f"{row['label']}: prompt {row['prompt_tokens']} tokens, {row['new_tokens']} new")
print(f"slots allocated {row['slots_allocated']:,}  live {row['slots_live']:,}  masked {row['slots_masked']:,}"
      f"  ({row['waste_pct']}% waste)  bytes {row['bytes_now']:,}")

# %% [markdown]
# 30 camadas × 64 posições são alocadas antes do primeiro token; 30 × 28 guardam um token (21 + 8 − 1: o último token
# é devolvido e nunca volta a entrar no modelo); o resto fica mascarado. Agora guarde essa execução e compare-a com um
# cache dinâmico.
#
# **Preveja primeiro.** A linha de bytes do cache dinâmico vai começar abaixo ou acima da do estático, e onde ela
# termina?

# %%
demo.on_add_to_comparison()
demo.run_and_wait(cache="dynamic")
Image(demo.plot.value)

# %%
# NBVAL_CHECK_OUTPUT
for row in demo.summary_rows():
    print(f"{row['run']:>4} {row['label']:<36} allocated {row['slots_allocated']:>5,}  live {row['slots_live']:>5,}"
          f"  peak bytes {row['peak_bytes']:>9,}")

# %% [markdown]
# O cache dinâmico aloca exatamente o que está ocupado: 840 posições contra 1,920 do cache estático, então no final
# ele guarda 44 % dos bytes do cache estático (1,290,240 de 2,949,120).
#
# ## 2. Um recorte que o cache não consegue desfazer
#
# Camadas de janela deslizante descartam os tokens que saem da janela, então remover os últimos tokens (o que fazem a
# decodificação especulativa e o rollback de um chat) exigiria tokens que já se foram. O minúsculo modelo aleatório
# `tiny-gemma3` tem uma janela de 8, então a pergunta pré-definida (104 bytes: um token por byte nos modelos
# minúsculos) passa muito dela.
#
# **Preveja primeiro.** Depois de uma execução com cache dinâmico, `crop(-2)` funciona? E depois da mesma execução com
# o registro do passado (past recording) ativado?

# %%
tiny = explore(model_name="tiny-gemma3")
tiny.run_and_wait(cache="dynamic", max_new_tokens=6, preset="kv_cache_question")
tiny.crop_n.value = 2
tiny.on_crop()
refusal = tiny.message_text
HTML(tiny.message.value)

# %%
tiny.run_and_wait(past_recording=True)
event = tiny.on_crop()
Image(tiny.plot.value)

# %%
# NBVAL_CHECK_OUTPUT
print("without past recording:", refusal[:90], "...")
print("with past recording:   ", tiny.message_text)
print("sliding layers now hold", sorted({r["slots_live"] for r in tiny.session.current.layer_rows()}), "tokens")

# %% [markdown]
# **Conclusão.** Com o registro do passado, as camadas deslizantes guardam todos os tokens até um recorte (as longas
# linhas azuis do mapa antes do recorte: mais memória), e o recorte então as restringe de novo à janela (laranja =
# descartada, vermelho = recortada). Sem ele, um cache deslizante não pode ser revertido: o explorador se recusa e diz
# por quê, enquanto o transformers puro lançaria um erro de dentro de uma camada.
#
# **A seguir.** Use o explorador para conferir suas respostas às perguntas "Preveja primeiro" dos notebooks anteriores,
# começando por `00_start_here`; `kvlab explore` abre o mesmo app em uma aba do navegador.
