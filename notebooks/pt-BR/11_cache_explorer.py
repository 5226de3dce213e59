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
# # 11 · O Explorador de Cache: brinque com todos os caches, ao vivo
#
# **Objetivo de aprendizagem.** Use o Explorador de Cache para testar suas próprias previsões: escolha um modelo e um cache,
# aperte Executar e veja o cache encher, dar a volta, ser mascarado, quantizado, descarregado e recortado enquanto os
# tokens aparecem.
#
# **Nas palavras do kvlab.** O Explorador de Cache é um pequeno app construído sobre tudo o que os notebooks anteriores
# mediram. Executar gera com decodificação greedy, com um cache instrumentado em uma thread em segundo plano (para que a
# página continue respondendo e Parar funcione); a cada poucos tokens, redesenha três gráficos a partir do `Trace` do
# cache:
# - **bytes guardados por tipo de camada** em função do passo (o passo 0 é o pré-preenchimento);
# - **posições alocadas, ocupadas e mascaradas**, somadas sobre as camadas: a diferença entre alocadas e ocupadas é o
#   desperdício de um cache estático;
# - **um mapa camada × posição**: verde = ocupada, cinza = mascarada (alocada, mas vazia), laranja = descartada por
#   uma janela deslizante, azul-escuro/azul-claro = quantizada/parte residual em precisão total, vermelho = recortada. Essas
#   também são as cores do kvlab nas figuras de todos os notebooks (`kvlab/plots/palette.py`).
#
# Só aparecem as opções que se aplicam ao cache escolhido. Combinações inválidas são explicadas no próprio app.
# "Adicionar à comparação" guarda uma execução, desenhada tracejada e como uma linha da tabela; o controle de recorte
# aplica `cache.crop(-n)` ao cache da última execução e explica a regra quando o recorte não pode ser desfeito.
#
# O mesmo app roda sem Jupyter: `kvlab explore` o serve com Voila apenas nesta máquina (localhost).

# %%
import kvlab

kvlab.set_language("pt-BR")

# %%
import transformers
from IPython.display import HTML, Image

from kvlab.explorer import explore
from kvlab.i18n import layer_kind_label, marks, number, percent
from kvlab.predictions import score

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
# pergunta pré-definida (preset) de 21 tokens e 8 tokens novos, quantas posições (somadas sobre as camadas) estão
# alocadas, quantas ocupadas e quantas mascaradas quando a execução termina? Digite seus três números e depois execute
# as células abaixo.

# %%
guess_allocated = None  # posições alocadas, todas as camadas: seu palpite
guess_live = None  # posições com um token: seu palpite
guess_masked = None  # posições alocadas, mas vazias: seu palpite

# %%
demo = explore(model_name="smollm2")
# chat=False: o texto do preset como está, 21 tokens (o Explorador de Cache o envolve no chat template do SmolLM2 por padrão)
demo.run_and_wait(cache="static", max_cache_len=64, max_new_tokens=8, preset="kv_cache_question", chat=False)
Image(demo.plot.value)

# %%
# NBVAL_CHECK_OUTPUT
row = demo.summary_rows()[-1]
print(f"{row['label']}: prompt de {row['prompt_tokens']} tokens, {row['new_tokens']} novos")
print(f"posições alocadas {number(row['slots_allocated'])}  ocupadas "
      f"{number(row['slots_live'])}  mascaradas {number(row['slots_masked'])}  "
      f"({marks(str(row['waste_pct']))}% de desperdício)  bytes {number(row['bytes_now'])}")

# %%
# NBVAL_CHECK_OUTPUT
display(score(guess_allocated, row["slots_allocated"], kind="count", label="posições alocadas:"))
display(score(guess_live, row["slots_live"], kind="count", label="posições ocupadas:"))
display(score(guess_masked, row["slots_masked"], kind="count", label="posições mascaradas:"))

# %% [markdown]
# 30 camadas × 64 posições ficam alocadas desde o pré-preenchimento (a linha preta do painel de posições é plana);
# 30 × 28 guardam um token no final (21 + 8 − 1: o último token é devolvido e nunca volta a entrar no modelo); o resto
# fica mascarado. Agora guarde essa execução e compare-a com um cache dinâmico sobre o mesmo prompt.
#
# **Preveja primeiro.** A linha de bytes do cache dinâmico começa abaixo da do estático (True ou False)? E que
# fração dos bytes do cache estático, em porcentagem, o cache dinâmico guarda no final?

# %%
guess_starts_lower = None  # True ou False: seu palpite
guess_end_share = None  # % dos bytes finais do cache estático: seu palpite

# %%
demo.on_add_to_comparison()
demo.run_and_wait(cache="dynamic")
Image(demo.plot.value)

# %%
# NBVAL_CHECK_OUTPUT
for row in demo.summary_rows():  # a execução guardada para comparação, depois a atual
    print(f"{row['label']:<36} alocadas {number(row['slots_allocated']):>5}  ocupadas "
          f"{number(row['slots_live']):>5}  bytes de pico {number(row['peak_bytes']):>9}")

# %%
# NBVAL_CHECK_OUTPUT
static_bytes = demo.session.comparison[0].trace.bytes_by_step()  # bytes guardados depois de cada passo, passo 0 = pré-preenchimento
dynamic_bytes = demo.session.current.trace.bytes_by_step()
starts_lower = dynamic_bytes[0] < static_bytes[0]
end_share = 100 * dynamic_bytes[-1] / static_bytes[-1]
print(f"depois do pré-preenchimento: dinâmico {number(dynamic_bytes[0])} B, estático {number(static_bytes[0])} B")
print(f"no final: dinâmico {number(dynamic_bytes[-1])} B = "
      f"{percent(end_share, 0)} do estático {number(static_bytes[-1])} B")
display(score(guess_starts_lower, starts_lower, kind="choice", label="começa mais baixo:"))
display(score(guess_end_share, end_share, unit="%", kind="share", label="parcela final:"))

# %% [markdown]
# O cache dinâmico aloca exatamente o que está ocupado: 840 posições contra 1.920 do cache estático, então no final
# ele guarda 44% dos bytes do cache estático (1.290.240 de 2.949.120). Ele começa nos 21 tokens do
# pré-preenchimento e cresce um token por passo; a linha do estático fica plana nas suas 64 posições desde o
# pré-preenchimento.
#
# ## 2. Recortar um cache deslizante
#
# Camadas de janela deslizante descartam os tokens que saem da janela. Tirar de volta os últimos tokens (o que fazem a
# decodificação especulativa e a reversão de um chat) é `crop(-n)`. O minúsculo modelo aleatório `tiny-gemma3` tem
# uma janela de 8 (suas camadas deslizantes guardam os últimos 7 tokens: janela − 1), então a pergunta pré-definida
# (104 bytes: um token por byte nos modelos minúsculos) passa muito dela.
#
# **Preveja primeiro.** Depois de uma execução com cache dinâmico de 6 tokens novos, `crop(-2)` funciona (True ou
# False)? E depois da mesma execução com o registro do passado (past recording) ativado?

# %%
guess_crop_works = None  # True ou False: seu palpite para a execução dinâmica simples
guess_crop_works_recorded = None  # True ou False: seu palpite com registro do passado

# %%
tiny = explore(model_name="tiny-gemma3")
tiny.run_and_wait(cache="dynamic", max_new_tokens=6, preset="kv_cache_question")
tiny.crop_n.value = 2
crop_works = tiny.on_crop() is not None  # on_crop devolve o evento de recorte, ou None quando recusa
refusal = tiny.message_text
HTML(tiny.message.value)

# %% [markdown]
# A mesma execução com o registro do passado ativado, desenhada antes do recorte: no mapa, as camadas deslizantes
# (s) agora estão verdes em todas as posições, como as camadas completas (f), em vez de laranja antes das suas últimas
# 7.

# %%
tiny.run_and_wait(past_recording=True)
before = tiny.session.current.layer_rows()
Image(tiny.plot.value)

# %% [markdown]
# Agora o mesmo `crop(-2)` neste cache:

# %%
event = tiny.on_crop()
crop_works_recorded = event is not None
Image(tiny.plot.value)

# %%
# NBVAL_CHECK_OUTPUT
def live_by_kind(layer_rows):
    """{layer kind, in the reader's language: the distinct numbers of tokens its layers hold}."""
    return {layer_kind_label(kind): sorted({r["slots_live"] for r in layer_rows if r["layer_kind"] == kind})
            for kind in sorted({r["layer_kind"] for r in layer_rows})}


print(f"prompt de {tiny.session.current.prompt_tokens} tokens, {tiny.session.current.new_tokens} novos")
print("sem registro do passado:", refusal[:90], "...")
print("com registro do passado:", tiny.message_text)
print("tokens guardados antes do recorte: ", live_by_kind(before))
print("tokens guardados depois do recorte:", live_by_kind(tiny.session.current.layer_rows()))
display(score(guess_crop_works, crop_works, kind="choice", label="recorte sem registro do passado:"))
display(score(guess_crop_works_recorded, crop_works_recorded, kind="choice", label="recorte com registro do passado:"))

# %% [markdown]
# Duas coisas no segundo painel são do recorte, não do último passo. O trace registra um recorte no passo que ele
# segue: o último ponto do painel de posições (passo 5) é desenhado depois do recorte, então a linha cai do passo 4
# direto para o que o recorte deixou, embora o próprio forward do passo 5 tenha antes acrescentado um token por
# camada. E o painel de bytes não cai: `crop` fatia os tensores de cada camada, e uma fatia é uma view que mantém
# vivo todo o armazenamento até que o `torch.cat` do próximo forward copie os tokens mantidos para tensores novos
# (notebook 07, seção 1). As duas coisas, lidas desta execução:

# %%
# NBVAL_CHECK_OUTPUT
run = tiny.session.current
slots = run.trace.slots_by_step()  # uma linha por passo; as releituras do recorte ficam sob o último passo
last = slots[-1]["step"]
forward_slots = sum(e["slots_live"] for e in run.trace.updates if e["step"] == last and e.get("op") != "crop")
print(f"posições, todas as camadas: passo {last - 1}: {slots[-2]['slots_live']}; forward do passo "
      f"{last}: {forward_slots}; depois de crop(-2), desenhado no passo {last}: {slots[-1]['slots_live']}")
print(f"bytes guardados: {number(run.crop_bytes['before'])} B antes do recorte, {number(run.crop_bytes['after'])} B "
      f"depois dele; {number(run.crop_bytes['kept_by_views'])} B desse armazenamento não guardam token nenhum agora")

# %% [markdown]
# **Conclusão.** Com o registro do passado, as camadas deslizantes guardam todos os tokens até um recorte (109 cada
# uma antes dele, tantos quanto as camadas completas: as linhas verdes do primeiro mapa, e bytes das camadas
# deslizantes acima dos das camadas completas no seu painel de bytes, já que 4 das 6 camadas são deslizantes), e o
# recorte então as restringe de novo à janela (7 tokens; laranja = descartada, vermelho = recortada no segundo mapa)
# enquanto as camadas completas guardam 107. Sem ele, um cache deslizante não pode ser revertido: o Explorador de Cache se
# recusa e diz por quê, enquanto o transformers puro lança um `RuntimeError` de dentro da camada
# (`DynamicSlidingWindowLayer.crop`).
#
# **A seguir.** Use o Explorador de Cache para conferir suas respostas às perguntas "Preveja primeiro" dos notebooks anteriores,
# começando por `00_start_here`; `kvlab explore` abre o mesmo app em uma aba do navegador.
